package sharestatus

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDeadTargetJobs(t *testing.T) {
	blank := oneTargetKinds[schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}]
	running := map[string]interface{}{"active": int64(2), "ready": int64(2)}
	if !blank(running, nil) || running["ready"] != int64(0) || running["active"] != int64(2) {
		t.Errorf("a running Job on a dead target: %v", running)
	}
	for _, cond := range []string{"Complete", "Failed"} {
		done := map[string]interface{}{"succeeded": int64(1), "ready": int64(0),
			"conditions": []interface{}{map[string]interface{}{"type": cond, "status": "True"}}}
		if blank(done, nil) {
			t.Errorf("a %s Job was marked on a dead target: %v", cond, done)
		}
	}
}
