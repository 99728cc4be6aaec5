package placement

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

func TestKeepAssignment(t *testing.T) {
	mine, theirs := workload.StateLabel("root:compute", "pc1"), workload.StateLabel("root:other", "pc9")
	fMine, fTheirs := workload.Finalizer("root:compute", "pc1"), workload.Finalizer("root:other", "pc9")

	// Create: whatever the tenant wrote goes.
	obj := &metav1.ObjectMeta{Labels: map[string]string{"app": "web", theirs: "Sync"}, Finalizers: []string{"user/keep", fTheirs},
		Annotations: map[string]string{workload.AssignedTargetAnnotation: "root:other/pc9", "note": "x"}}
	KeepAssignment(obj, nil)
	if len(obj.Labels) != 1 || !slices.Equal(obj.Finalizers, []string{"user/keep"}) || len(obj.Annotations) != 1 {
		t.Errorf("create: %+v", obj)
	}

	// Update: kcp's values come back, the tenant's go.
	old := &metav1.ObjectMeta{Labels: map[string]string{mine: "Sync"}, Finalizers: []string{fMine},
		Annotations: map[string]string{workload.AssignedTargetAnnotation: "root:compute/pc1"}}
	obj = &metav1.ObjectMeta{Labels: map[string]string{"app": "web", theirs: "Sync"}, Finalizers: []string{fTheirs}}
	KeepAssignment(obj, old)
	if obj.Labels[mine] != "Sync" || obj.Labels[theirs] != "" || obj.Labels["app"] != "web" ||
		!slices.Equal(obj.Finalizers, []string{fMine}) || obj.Annotations[workload.AssignedTargetAnnotation] != "root:compute/pc1" {
		t.Errorf("update: %+v", obj)
	}
}

func TestKCPKeys(t *testing.T) {
	l1, f1 := workload.StateLabel("root:compute", "pc1"), workload.Finalizer("root:compute", "pc1")
	base := &metav1.ObjectMeta{Labels: map[string]string{l1: "Sync", "app": "web"}, Finalizers: []string{"user/keep", f1},
		Annotations: map[string]string{workload.AssignedTargetAnnotation: "root:compute/pc1", "note": "x"}}
	same := &metav1.ObjectMeta{Labels: map[string]string{l1: "Sync", "app": "db"}, Finalizers: []string{f1},
		Annotations: map[string]string{workload.AssignedTargetAnnotation: "root:compute/pc1"}}
	if kcpKeys(base) != kcpKeys(same) {
		t.Errorf("the tenant's own keys count: %q vs %q", kcpKeys(base), kcpKeys(same))
	}
	for _, changed := range []*metav1.ObjectMeta{
		{Labels: map[string]string{l1: "Sync"}, Annotations: same.Annotations},                                                                               // finalizer gone
		{Labels: map[string]string{l1: "Sync", workload.StateLabel("root:compute", "pc2"): "Sync"}, Finalizers: []string{f1}, Annotations: same.Annotations}, // another target
		{Labels: map[string]string{l1: "Sync"}, Finalizers: []string{f1}},                                                                                    // annotation gone
		{Labels: map[string]string{l1: "Sync"}, Finalizers: []string{f1}, Annotations: map[string]string{workload.AssignedTargetAnnotation: "root:compute/pc1", workload.StatusAnnotationPrefix + "x": "{}"}},
		{Labels: map[string]string{l1: "Sync"}, Finalizers: []string{f1}, Annotations: map[string]string{workload.AssignedTargetAnnotation: "root:compute/pc1", workload.RolloutAnnotation: "{}"}}, // a forged rollout
	} {
		if kcpKeys(changed) == kcpKeys(base) {
			t.Errorf("a change of kcp's keys goes unseen: %+v", changed)
		}
	}
}
