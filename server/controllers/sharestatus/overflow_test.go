package sharestatus

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

// TestOverflowCondition: a Deployment of an overflow division gets an
// Overflow condition saying how the replicas went, True while some spilled
// beyond the first group; others get none.
func TestOverflowCondition(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 1, Labels: map[string]string{
		workload.StateLabelPrefix + "a": workload.StateSync, workload.StateLabelPrefix + "b": workload.StateSync}}}
	report := func(s workload.ShareStatus) string {
		s.Mode, s.Status = workload.ModeDivide, map[string]interface{}{"replicas": int64(s.Share)}
		raw, _ := json.Marshal(s)
		return string(raw)
	}
	msg := "on-prem: 4 (room for 4), full: the rest spills to the next group; cloud: 3 (room for 90)"
	d.Annotations = map[string]string{
		workload.StatusAnnotationPrefix + "a": report(workload.ShareStatus{Share: 4, Group: "on-prem", Division: msg, Spilled: true}),
		workload.StatusAnnotationPrefix + "b": report(workload.ShareStatus{Share: 3, Group: "cloud", Division: msg, Spilled: true}),
	}
	st, ok := Aggregate(d)
	if !ok {
		t.Fatal("not aggregated")
	}
	var got *appsv1.DeploymentCondition
	for i := range st.Conditions {
		if st.Conditions[i].Type == workload.ConditionOverflow {
			got = &st.Conditions[i]
		}
	}
	if got == nil || got.Status != corev1.ConditionTrue || got.Reason != workload.ReasonSpilled || got.Message != msg {
		t.Fatalf("Overflow condition: %+v", got)
	}

	d.Annotations = map[string]string{
		workload.StatusAnnotationPrefix + "a": report(workload.ShareStatus{Share: 3, Division: "on-prem: 3 (room for 4); cloud: 0 (room for 90)"}),
		workload.StatusAnnotationPrefix + "b": report(workload.ShareStatus{Share: 0, Division: "on-prem: 3 (room for 4); cloud: 0 (room for 90)"}),
	}
	st, _ = Aggregate(d)
	if c := st.Conditions[len(st.Conditions)-1]; c.Type != workload.ConditionOverflow || c.Status != corev1.ConditionFalse || c.Reason != workload.ReasonInPreferredGroup {
		t.Fatalf("in the preferred group: %+v", c)
	}

	// A plain Divide: no Overflow condition.
	d.Annotations = map[string]string{
		workload.StatusAnnotationPrefix + "a": report(workload.ShareStatus{Share: 3}),
		workload.StatusAnnotationPrefix + "b": report(workload.ShareStatus{Share: 3}),
	}
	st, _ = Aggregate(d)
	for _, c := range st.Conditions {
		if c.Type == workload.ConditionOverflow {
			t.Fatalf("an Overflow condition without groups: %+v", c)
		}
	}
}
