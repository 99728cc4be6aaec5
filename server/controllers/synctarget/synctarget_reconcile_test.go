package synctarget

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
)

func TestReconcileHeartbeat(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ready := []metav1.Condition{{Type: workload.ConditionReady, Status: metav1.ConditionTrue, Reason: workload.ReasonHeartbeat}}
	for _, tc := range []struct {
		name       string
		heartbeat  *time.Time
		timeout    *time.Duration
		conditions []metav1.Condition
		wantStatus metav1.ConditionStatus // "" = no write
		wantAfter  bool
	}{
		{name: "never heard", wantStatus: metav1.ConditionUnknown},
		{name: "fresh", heartbeat: ptr(now.Add(-10 * time.Second)), conditions: ready, wantAfter: true},
		{name: "stale", heartbeat: ptr(now.Add(-41 * time.Second)), conditions: ready, wantStatus: metav1.ConditionFalse},
		{name: "own timeout", heartbeat: ptr(now.Add(-10 * time.Second)), timeout: ptr(5 * time.Second), conditions: ready, wantStatus: metav1.ConditionFalse},
		{name: "already false", heartbeat: ptr(now.Add(-time.Hour)),
			conditions: []metav1.Condition{{Type: workload.ConditionReady, Status: metav1.ConditionFalse, Reason: workload.ReasonHeartbeatTimeout}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "pc1"}}
			target.Status.Conditions = tc.conditions
			if tc.heartbeat != nil {
				target.Status.LastHeartbeatTime = &metav1.Time{Time: *tc.heartbeat}
			}
			if tc.timeout != nil {
				target.Spec.HeartbeatTimeout = &metav1.Duration{Duration: *tc.timeout}
			}
			m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&target)
			var written *workload.SyncTarget
			r := &reconciler{now: func() time.Time { return now }, timeout: 40 * time.Second,
				updateStatus: func(_ context.Context, obj *unstructured.Unstructured) error {
					written = &workload.SyncTarget{}
					return runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, written)
				}}
			after, err := r.reconcile(context.Background(), &unstructured.Unstructured{Object: m})
			if err != nil {
				t.Fatal(err)
			}
			if (after > 0) != tc.wantAfter {
				t.Errorf("requeue after %s, want requeue %v", after, tc.wantAfter)
			}
			if tc.wantStatus == "" {
				if written != nil {
					t.Errorf("wrote status %+v, want no write", written.Status)
				}
				return
			}
			if written == nil {
				t.Fatal("no status written")
			}
			if c := meta.FindStatusCondition(written.Status.Conditions, workload.ConditionReady); c == nil || c.Status != tc.wantStatus {
				t.Errorf("Ready = %+v, want %s", c, tc.wantStatus)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
