package syncer

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
)

// DefaultOutOfCapacityAfter is how long a pod of kcp's workloads must have
// been unschedulable before the syncer reports its cluster out of
// capacity (syncer --out-of-capacity-after).
const DefaultOutOfCapacityAfter = 30 * time.Second

// unschedulable is the pod of kcp's workloads (in the syncer's namespaces)
// that the physical cluster's scheduler has failed to place for longest.
type unschedulable struct {
	count     int
	namespace string
	name      string
	since     time.Time
	message   string
}

// unschedulablePods looks through the downstream pods the syncer
// projects (its own namespaces only) for pending pods whose PodScheduled
// condition is False with reason Unschedulable.
func (s *Syncer) unschedulablePods() unschedulable {
	var u unschedulable
	if s.proj == nil || s.proj.down[podsGVR] == nil {
		return u
	}
	for _, o := range s.proj.down[podsGVR].List() {
		if st, ok := o.(*stored); ok && st.phase != "Pending" {
			continue // decoded only when pending
		}
		pod := object(o)
		if pod == nil || pod.GetDeletionTimestamp() != nil {
			continue
		}
		if phase, _, _ := unstructured.NestedString(pod.Object, "status", "phase"); phase != "Pending" {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(pod.Object, "status", "conditions")
		for _, c := range conds {
			m, ok := c.(map[string]interface{})
			if !ok || m["type"] != "PodScheduled" || m["status"] != "False" || m["reason"] != "Unschedulable" {
				continue
			}
			since := pod.GetCreationTimestamp().Time
			if at, ok := m["lastTransitionTime"].(string); ok {
				if t, err := time.Parse(time.RFC3339, at); err == nil {
					since = t
				}
			}
			u.count++
			if u.count == 1 || since.Before(u.since) {
				u.namespace, u.name, u.since = pod.GetNamespace(), pod.GetName(), since
				u.message, _ = m["message"].(string)
			}
		}
	}
	return u
}

// setOutOfCapacity sets the SyncTarget's OutOfCapacity condition from
// the pods the scheduler could not place (kcp taints the target
// workload.kcp.io/out-of-capacity:NoSchedule while it is True).
func (s *Syncer) setOutOfCapacity(target *workload.SyncTarget, now time.Time) {
	after := s.OutOfCapacityAfter
	if after <= 0 {
		after = DefaultOutOfCapacityAfter
	}
	u := s.unschedulablePods()
	cond := metav1.Condition{Type: workload.ConditionOutOfCapacity, Status: metav1.ConditionFalse, Reason: workload.ReasonPodsScheduled,
		Message: "the physical cluster's scheduler has placed every pod of kcp's workloads (or not failed for " + after.String() + ")"}
	if u.count > 0 && now.Sub(u.since) >= after {
		cond.Status, cond.Reason = metav1.ConditionTrue, workload.ReasonPodsUnschedulable
		cond.Message = fmt.Sprintf("%d pods of kcp's workloads cannot be scheduled; %s/%s for %s: %s",
			u.count, u.namespace, u.name, now.Sub(u.since).Round(time.Second), u.message)
		if len(cond.Message) > 1024 {
			cond.Message = cond.Message[:1024]
		}
	}
	meta.SetStatusCondition(&target.Status.Conditions, cond)
}
