package sharestatus

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
)

func daemonSetWith(t *testing.T, reports map[string]map[string]interface{}) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]interface{}{"name": "agent", "namespace": "default", "generation": int64(2)}}}
	labels, ann := map[string]string{}, map[string]string{}
	for _, k := range []string{"a", "b"} {
		labels[workload.StateLabelPrefix+k] = workload.StateSync
	}
	for k, st := range reports {
		raw, err := json.Marshal(workload.ShareStatus{Mode: workload.ModeDuplicate, Share: 1, Status: st})
		if err != nil {
			t.Fatal(err)
		}
		ann[workload.StatusAnnotationPrefix+k] = string(raw)
	}
	u.SetLabels(labels)
	u.SetAnnotations(ann)
	return u
}

func TestAggregateDaemonSet(t *testing.T) {
	three := map[string]interface{}{"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3, "numberAvailable": 3, "updatedNumberScheduled": 3, "observedGeneration": 2}
	two := map[string]interface{}{"desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberReady": 1, "numberAvailable": 1, "numberUnavailable": 1, "updatedNumberScheduled": 2, "observedGeneration": 1}
	u := daemonSetWith(t, map[string]map[string]interface{}{"a": three, "b": two})
	st, ok := AggregateDaemonSet(u, nil)
	if !ok {
		t.Fatal("no sum")
	}
	if st["desiredNumberScheduled"] != int64(5) || st["numberReady"] != int64(4) || st["numberUnavailable"] != int64(1) || st["observedGeneration"] != int64(1) {
		t.Errorf("sum: %v", st)
	}
	if _, has := st["conditions"]; has {
		t.Errorf("conditions with every target alive: %v", st["conditions"])
	}
	// b dies: its nodes count, none ready; the condition names it.
	st, _ = AggregateDaemonSet(u, map[string]DeadTarget{"b": {Why: "root:compute/pc2: no heartbeat", Episode: "e1"}})
	if st["desiredNumberScheduled"] != int64(5) || st["numberReady"] != int64(3) || st["numberAvailable"] != int64(3) || st["numberUnavailable"] != int64(2) {
		t.Errorf("with b dead: %v", st)
	}
	conds, _ := st["conditions"].([]interface{})
	if len(conds) != 1 || conds[0].(map[string]interface{})["reason"] != workload.ReasonSyncTargetNotReady ||
		!strings.Contains(conds[0].(map[string]interface{})["message"].(string), "root:compute/pc2") {
		t.Errorf("condition: %v", conds)
	}
	// b has not reported: not observed yet, nothing of it counted.
	u = daemonSetWith(t, map[string]map[string]interface{}{"a": three})
	st, _ = AggregateDaemonSet(u, nil)
	if st["desiredNumberScheduled"] != int64(3) || st["observedGeneration"] != nil {
		t.Errorf("one report of two: %v", st)
	}
	// One target: its syncer writes the status itself.
	one := daemonSetWith(t, map[string]map[string]interface{}{"a": three})
	one.SetLabels(map[string]string{workload.StateLabelPrefix + "a": workload.StateSync})
	if _, ok := AggregateDaemonSet(one, nil); ok {
		t.Error("summed a DaemonSet of one target")
	}
}
