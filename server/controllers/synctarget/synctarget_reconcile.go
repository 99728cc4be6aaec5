package synctarget

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
)

var metav1UpdateOptions = metav1.UpdateOptions{FieldManager: "kcp-synctarget-heartbeat"}

// reconciler takes its dependencies as functions, so a unit test passes
// closures.
type reconciler struct {
	now          func() time.Time
	timeout      time.Duration
	updateStatus func(context.Context, *unstructured.Unstructured) error
}

// reconcile sets Ready to False once the last heartbeat is older than the
// timeout (Unknown while no syncer has ever reported), and asks to look
// again when a fresh heartbeat would expire.
func (r *reconciler) reconcile(ctx context.Context, obj *unstructured.Unstructured) (time.Duration, error) {
	var target workload.SyncTarget
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &target); err != nil {
		return 0, nil // not ours to fix; the schema keeps it from happening
	}
	timeout := r.timeout
	if t := target.Spec.HeartbeatTimeout; t != nil && t.Duration > 0 {
		timeout = t.Duration
	}
	want := metav1.Condition{Type: workload.ConditionReady}
	switch hb := target.Status.LastHeartbeatTime; {
	case hb == nil:
		want.Status, want.Reason = metav1.ConditionUnknown, workload.ReasonNeverHeard
		want.Message = "no syncer has reported for this physical cluster yet (run the syncer: docs/multicluster.md)"
	default:
		age := r.now().Sub(hb.Time)
		if age < timeout {
			return timeout - age + 100*time.Millisecond, nil
		}
		want.Status, want.Reason = metav1.ConditionFalse, workload.ReasonHeartbeatTimeout
		want.Message = fmt.Sprintf("no heartbeat from the syncer since %s (timeout %s)", hb.UTC().Format(time.RFC3339), timeout)
	}
	if c := meta.FindStatusCondition(target.Status.Conditions, workload.ConditionReady); c != nil && c.Status == want.Status && c.Reason == want.Reason {
		return 0, nil
	}
	meta.SetStatusCondition(&target.Status.Conditions, want)
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&target.Status)
	if err != nil {
		return 0, err
	}
	obj.Object["status"] = status
	return 0, r.updateStatus(ctx, obj)
}
