package sharestatus

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
)

// copyOf is a target's report of its copy: written from generation w,
// observed (or not), with ready replicas of its 2.
func copyOf(t *testing.T, w int64, observed bool, updated, available int32) string {
	st := appsv1.DeploymentStatus{ObservedGeneration: w, Replicas: 2, UpdatedReplicas: updated, ReadyReplicas: available, AvailableReplicas: available}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		t.Fatal(err)
	}
	s := workload.ShareStatus{Mode: workload.ModeDuplicate, Share: 2, Status: u, Written: w}
	if observed {
		s.Observed = w
	}
	raw, _ := json.Marshal(s)
	return string(raw)
}

// TestRolloutStep walks a rollout over three one-target groups: the
// decisions to release, wait, advance and stop.
func TestRolloutStep(t *testing.T) {
	two := int32(2)
	deadline := int32(60)
	pol := &workload.NamespacePolicy{Mode: workload.ModeDuplicate, Rollout: &workload.RolloutSpec{GroupByLabel: "wave", MinAvailableSeconds: 10, ProgressDeadlineSeconds: &deadline},
		Targets: map[string]workload.TargetPolicy{"a": {Name: "loc/pc1"}, "b": {Name: "loc/pc2"}, "c": {Name: "loc/pc3"}}}
	labels := map[string]map[string]string{"a": {"wave": "1"}, "b": {"wave": "2"}, "c": {"wave": "3"}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 5, Labels: map[string]string{}, Annotations: map[string]string{}}}
	d.Spec.Replicas = &two
	for _, k := range []string{"a", "b", "c"} {
		d.Labels[workload.StateLabelPrefix+k] = workload.StateSync
		d.Annotations[workload.StatusAnnotationPrefix+k] = copyOf(t, 4, true, 2, 2)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(now time.Time) (*workload.RolloutState, time.Duration) {
		t.Helper()
		st, after := RolloutStep(now, d, pol, labels)
		d = withRolloutState(d, st)
		return st, after
	}

	// A new generation: three groups by wave, the first released.
	st, after := step(t0)
	if st == nil || len(st.Groups) != 3 || st.Current != 0 || !st.Released(5, "a") || st.Released(5, "b") || after != 60*time.Second {
		t.Fatalf("start: %+v, look again after %s", st, after)
	}
	// pc1 written, not observed yet: still waiting.
	d.Annotations[workload.StatusAnnotationPrefix+"a"] = copyOf(t, 5, false, 2, 2)
	if st, after = step(t0.Add(5 * time.Second)); st.Current != 0 || st.AvailableSince != nil || after != 55*time.Second {
		t.Fatalf("pc1 not observed: %+v %s", st, after)
	}
	// pc1 available: the next group waits minAvailableSeconds.
	d.Annotations[workload.StatusAnnotationPrefix+"a"] = copyOf(t, 5, true, 2, 2)
	if st, after = step(t0.Add(6500 * time.Millisecond)); st.Current != 0 || st.AvailableSince == nil || after != 10*time.Second {
		t.Fatalf("pc1 available: %+v %s", st, after)
	}
	if st, _ = step(t0.Add(10 * time.Second)); st.Current != 0 {
		t.Fatalf("released pc2 before pc1 was available for 10s: %+v", st)
	}
	// Not one moment early: the state keeps sub-second times.
	if st, _ = step(t0.Add(16200 * time.Millisecond)); st.Current != 0 {
		t.Fatalf("released pc2 9.7s after pc1 was available: %+v", st)
	}
	if st, after = step(t0.Add(16500 * time.Millisecond)); st.Current != 1 || !st.Released(5, "b") || st.Released(5, "c") || after != 60*time.Second {
		t.Fatalf("pc1 available for 10s: %+v %s", st, after)
	}
	// pc2 never gets available: the rollout stops at its deadline.
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = copyOf(t, 5, true, 1, 0)
	if st, _ = step(t0.Add(75 * time.Second)); st.Stopped != "" {
		t.Fatalf("stopped before the deadline: %+v", st)
	}
	st, after = step(t0.Add(77 * time.Second))
	if after != 0 || !strings.Contains(st.Stopped, "group 2 of 3 (loc/pc2)") || !strings.Contains(st.Stopped, "loc/pc2: 1 of 2 replicas updated, 0 available, 0 unavailable") ||
		!strings.Contains(st.Stopped, "loc/pc3 keep the previous spec") {
		t.Fatalf("stopped: %+v %s", st, after)
	}
	if st.Released(5, "c") {
		t.Error("a stopped rollout released the next group")
	}
	// Stopped stays stopped, even once pc2 recovers.
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = copyOf(t, 5, true, 2, 2)
	if st, _ = step(t0.Add(100 * time.Second)); st.Stopped == "" || st.Current != 1 {
		t.Fatalf("a stopped rollout went on: %+v", st)
	}
	// The summed status: pc3 held on the old spec counts no updated
	// replica and does not hold observedGeneration back; Progressing says
	// the deadline was exceeded.
	agg, ok := Aggregate(d)
	if !ok || agg.ObservedGeneration != 5 || agg.UpdatedReplicas != 0 {
		t.Fatalf("summed status of the stopped rollout: %+v", agg)
	}
	if p := agg.Conditions[1]; p.Status != corev1.ConditionFalse || p.Reason != ReasonProgressDeadlineExceeded || p.Message != st.Stopped {
		t.Errorf("Progressing of the stopped rollout: %+v", p)
	}

	// A new generation starts over with every target, pc1 first.
	d.Generation = 6
	if st, _ = step(t0.Add(101 * time.Second)); st.Generation != 6 || st.Stopped != "" || st.Current != 0 || len(st.Groups) != 3 {
		t.Fatalf("the next generation: %+v", st)
	}
	// A target not released counts no updated replica; one released but
	// not observed holds observedGeneration back.
	d.Annotations[workload.StatusAnnotationPrefix+"a"] = copyOf(t, 6, false, 2, 2)
	if agg, _ = Aggregate(d); agg.ObservedGeneration != 5 || agg.UpdatedReplicas != 0 {
		t.Errorf("pc1 written, not observed: %+v", agg)
	}
	if p := agg.Conditions[1]; p.Status != corev1.ConditionTrue || !strings.Contains(p.Message, "group 1 of 3 (loc/pc1) released") {
		t.Errorf("Progressing while rolling out: %+v", p)
	}

	// Rollout off: no state.
	if st, _ := RolloutStep(t0, d, &workload.NamespacePolicy{Mode: workload.ModeDuplicate}, labels); st != nil {
		t.Errorf("no rollout in the policy: %+v", st)
	}
	// A new Deployment (generation 1) has nothing to roll out.
	fresh := d.DeepCopy()
	fresh.Generation = 1
	delete(fresh.Annotations, workload.RolloutAnnotation)
	if st, _ := RolloutStep(t0, fresh, pol, labels); st == nil || !st.Done() {
		t.Errorf("a new Deployment: %+v", st)
	}
}
