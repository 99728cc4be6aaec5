package sharestatus

import (
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
)

// A DaemonSet runs on every target its namespace is placed on (one pod per
// node of each), so its status in the workspace is the sum of its copies':
// each target's syncer reports its copy's status in its annotation
// workload.kcp.io/status-<key> (as for Deployments) and kcp writes the sum.
// A target whose heartbeat has stopped counts with its last number of
// nodes, none of them ready or available, and the condition
// Available=False (SyncTargetNotReady) names it; a target that has not
// reported yet counts as nothing scheduled. observedGeneration is the
// DaemonSet's generation only once every target has observed it.

// daemonSetCounts are the status counts that add up over clusters.
var daemonSetCounts = []string{"currentNumberScheduled", "desiredNumberScheduled", "numberMisscheduled", "numberReady",
	"updatedNumberScheduled", "numberAvailable", "numberUnavailable"}

// AggregateDaemonSet returns the summed status of a DaemonSet assigned to
// several targets (dead: the assigned targets whose heartbeat stopped), and
// false when it runs on one target only.
func AggregateDaemonSet(u *unstructured.Unstructured, dead map[string]DeadTarget) (map[string]interface{}, bool) {
	keys := assignedKeys(u.GetLabels())
	if len(keys) < 2 {
		return nil, false
	}
	sum := map[string]int64{}
	reported := 0
	observed := u.GetGeneration()
	var notCounted, missing []string
	for _, k := range keys {
		raw, ok := u.GetAnnotations()[workload.StatusAnnotationPrefix+k]
		var share workload.ShareStatus
		var st appsv1.DaemonSetStatus
		if ok && json.Unmarshal([]byte(raw), &share) == nil && runtime.DefaultUnstructuredConverter.FromUnstructured(share.Status, &st) == nil {
			reported++
			observed = min(observed, st.ObservedGeneration)
		} else {
			missing = append(missing, k)
			continue
		}
		if d, isDead := dead[k]; isDead {
			// Its nodes are still its nodes; what runs there is unknown.
			sum["desiredNumberScheduled"] += int64(st.DesiredNumberScheduled)
			sum["numberUnavailable"] += int64(st.DesiredNumberScheduled)
			notCounted = append(notCounted, d.Why)
			continue
		}
		sum["currentNumberScheduled"] += int64(st.CurrentNumberScheduled)
		sum["desiredNumberScheduled"] += int64(st.DesiredNumberScheduled)
		sum["numberMisscheduled"] += int64(st.NumberMisscheduled)
		sum["numberReady"] += int64(st.NumberReady)
		sum["updatedNumberScheduled"] += int64(st.UpdatedNumberScheduled)
		sum["numberAvailable"] += int64(st.NumberAvailable)
		sum["numberUnavailable"] += int64(st.NumberUnavailable)
	}
	if reported == 0 {
		return nil, false
	}
	prev, _, _ := unstructured.NestedMap(u.Object, "status")
	out := map[string]interface{}{}
	for k, v := range prev {
		out[k] = v
	}
	for _, f := range daemonSetCounts {
		out[f] = sum[f]
	}
	if len(missing) == 0 {
		out["observedGeneration"] = observed
	}
	conds, _ := out["conditions"].([]interface{})
	var kept []interface{}
	var prevAvailable map[string]interface{}
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == "Available" {
			prevAvailable = m
			continue
		}
		kept = append(kept, c)
	}
	if len(notCounted) > 0 {
		msg := fmt.Sprintf("%d of %d clusters report: not counted: %s", len(keys)-len(notCounted), len(keys), strings.Join(notCounted, "; "))
		cond := map[string]interface{}{"type": "Available", "status": "False", "reason": workload.ReasonSyncTargetNotReady, "message": msg}
		if prevAvailable != nil && prevAvailable["status"] == "False" && prevAvailable["message"] == msg {
			cond["lastTransitionTime"] = prevAvailable["lastTransitionTime"]
		}
		kept = append(kept, cond)
	}
	if len(kept) > 0 {
		out["conditions"] = kept
	} else {
		delete(out, "conditions")
	}
	return out, true
}
