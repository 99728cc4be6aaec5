package sharestatus

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

// Honest status: a target whose heartbeat has stopped (its SyncTarget is
// Ready=False) no longer counts. kcp cannot know what runs there, so from
// the heartbeat timeout on, before and apart from any eviction:
//
//   - a Deployment on several targets: kcp marks that target's report
//     (the annotation workload.kcp.io/status-<key>) Unreachable, with why;
//     Aggregate counts such a share as nothing ready or available;
//   - a Deployment on that one target: kcp writes over the status the
//     syncer wrote: nothing ready or available, Available=False with the
//     reason SyncTargetNotReady naming the target.
//
// The mark is made once per NotReady episode of a target (the Ready
// condition's transition time). The target's syncer, when it reports
// again, finds kcp's status (or annotation) differing from its copy's and
// writes its own again, even if nothing changed on the physical cluster;
// anything it writes after the mark is fresh and stays, even before its
// next heartbeat turns the target Ready (so a syncer alive whose heartbeat
// is late never has its reports fought over).

// DeadTarget is an assigned target whose heartbeat has stopped.
type DeadTarget struct {
	// Why names the target and says why: "root:compute/pc1: no heartbeat
	// from the syncer since ... (timeout 20s)".
	Why string
	// Episode identifies the NotReady episode (when Ready became False).
	Episode string
}

// DeadTargetOf returns the DeadTarget of a SyncTarget (its location
// workspace path and name) if its Ready condition is False.
func DeadTargetOf(location string, t *workload.SyncTarget) (DeadTarget, bool) {
	c := meta.FindStatusCondition(t.Status.Conditions, workload.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse {
		return DeadTarget{}, false
	}
	why := c.Message
	if why == "" {
		why = "Ready=False (" + c.Reason + ")"
	}
	return DeadTarget{Why: fmt.Sprintf("%s/%s: %s", location, t.Name, why), Episode: c.LastTransitionTime.UTC().Format("2006-01-02T15:04:05Z") + "/" + c.Reason}, true
}

// AssignedKeys are the keys of the targets a Deployment is assigned to, in
// order.
func AssignedKeys(d *appsv1.Deployment) []string {
	var keys []string
	for k, v := range d.Labels {
		if key, ok := strings.CutPrefix(k, workload.StateLabelPrefix); ok && v == workload.StateSync {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys
}

// MarkUnreachable returns a copy of d with what the dead targets (by key)
// reported no longer counted: on several targets each one's annotation
// marked Unreachable (a target that never reported has nothing to mark),
// on one target the status replaced by workload.UnreachableStatus. It
// returns nil when there is nothing to change.
func MarkUnreachable(d *appsv1.Deployment, dead map[string]DeadTarget) *appsv1.Deployment {
	keys := AssignedKeys(d)
	out := d.DeepCopy()
	changed := false
	switch {
	case len(keys) == 1:
		t, ok := dead[keys[0]]
		if !ok {
			return nil
		}
		desired := int32(1)
		if d.Spec.Replicas != nil {
			desired = *d.Spec.Replicas
		}
		out.Status = workload.UnreachableStatus(d.Status, desired, t.Why)
		changed = !sameStatus(d.Status, out.Status)
	case len(keys) > 1:
		for _, k := range keys {
			t, ok := dead[k]
			if !ok {
				continue
			}
			name := workload.StatusAnnotationPrefix + k
			raw, ok := d.Annotations[name]
			if !ok {
				continue
			}
			var s workload.ShareStatus
			if err := json.Unmarshal([]byte(raw), &s); err != nil || s.Unreachable == t.Why {
				continue
			}
			s.Unreachable = t.Why
			marked, err := json.Marshal(s)
			if err != nil {
				continue
			}
			out.Annotations[name] = string(marked)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return out
}
