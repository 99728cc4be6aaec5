package sharestatus

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
)

func available(st appsv1.DeploymentStatus) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == appsv1.DeploymentAvailable {
			return &st.Conditions[i]
		}
	}
	return nil
}

func TestDeadTargetOf(t *testing.T) {
	target := &workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "pc1"}}
	if _, dead := DeadTargetOf("root:compute", target); dead {
		t.Error("a target that never reported is dead")
	}
	target.Status.Conditions = []metav1.Condition{{Type: workload.ConditionReady, Status: metav1.ConditionTrue, Reason: workload.ReasonHeartbeat}}
	if _, dead := DeadTargetOf("root:compute", target); dead {
		t.Error("a Ready target is dead")
	}
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	target.Status.Conditions = []metav1.Condition{{Type: workload.ConditionReady, Status: metav1.ConditionFalse, Reason: workload.ReasonHeartbeatTimeout,
		Message: "no heartbeat from the syncer since 2026-01-02T03:03:45Z (timeout 20s)", LastTransitionTime: since}}
	d, dead := DeadTargetOf("root:compute", target)
	if !dead || d.Why != "root:compute/pc1: no heartbeat from the syncer since 2026-01-02T03:03:45Z (timeout 20s)" {
		t.Errorf("dead %v, why %q", dead, d.Why)
	}
	// A later episode is another one.
	target.Status.Conditions[0].LastTransitionTime = metav1.NewTime(since.Add(time.Minute))
	if d2, _ := DeadTargetOf("root:compute", target); d2.Episode == d.Episode {
		t.Errorf("two NotReady episodes are one: %q", d.Episode)
	}
}

func TestHonestDivide(t *testing.T) {
	done := []appsv1.DeploymentCondition{cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable"), cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable")}
	four := int32(4)
	running := appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, Conditions: done}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 1, Labels: map[string]string{
		workload.StateLabelPrefix + "a": workload.StateSync, workload.StateLabelPrefix + "b": workload.StateSync},
		Annotations: map[string]string{
			workload.StatusAnnotationPrefix + "a": share(t, workload.ModeDivide, running),
			workload.StatusAnnotationPrefix + "b": share(t, workload.ModeDivide, running),
		}}, Spec: appsv1.DeploymentSpec{Replicas: &four}}
	if st, _ := Aggregate(d); st.AvailableReplicas != 4 || available(st).Status != corev1.ConditionTrue {
		t.Fatalf("both alive: %+v", st)
	}
	if MarkUnreachable(d, nil) != nil {
		t.Error("marked with no dead target")
	}

	why := "root:compute/pc2: no heartbeat from the syncer since 2026-01-02T03:03:45Z (timeout 20s)"
	dead := map[string]DeadTarget{"b": {Why: why, Episode: "e1"}}
	marked := MarkUnreachable(d, dead)
	if marked == nil {
		t.Fatal("b's report not marked")
	}
	if d.Annotations[workload.StatusAnnotationPrefix+"b"] == marked.Annotations[workload.StatusAnnotationPrefix+"b"] {
		t.Error("MarkUnreachable changed its argument")
	}
	st, ok := Aggregate(marked)
	if !ok || st.Replicas != 4 || st.UpdatedReplicas != 4 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 || st.UnavailableReplicas != 2 {
		t.Errorf("b dead: %+v", st)
	}
	if c := available(st); c.Status != corev1.ConditionFalse || c.Reason != workload.ReasonSyncTargetNotReady || !strings.Contains(c.Message, why) {
		t.Errorf("b dead, Available: %+v", c)
	}
	if MarkUnreachable(marked, dead) != nil {
		t.Error("marked twice")
	}

	// The whole still available (the survivors already run every replica,
	// as after a rebalancing): Available stays True and still says who is
	// not counted.
	grown := running
	grown.Replicas, grown.UpdatedReplicas, grown.ReadyReplicas, grown.AvailableReplicas = 4, 4, 4, 4
	marked.Annotations[workload.StatusAnnotationPrefix+"a"] = share(t, workload.ModeDivide, grown)
	if st, _ = Aggregate(marked); available(st).Status != corev1.ConditionTrue || !strings.Contains(available(st).Message, why) {
		t.Errorf("whole available with b dead: %+v", available(st))
	}

	// b's syncer reports again (its annotation replaced, without the
	// mark): it counts again.
	back := marked.DeepCopy()
	back.Annotations[workload.StatusAnnotationPrefix+"a"] = share(t, workload.ModeDivide, running)
	back.Annotations[workload.StatusAnnotationPrefix+"b"] = share(t, workload.ModeDivide, running)
	if st, _ = Aggregate(back); st.AvailableReplicas != 4 || available(st).Status != corev1.ConditionTrue || strings.Contains(available(st).Message, "pc2") {
		t.Errorf("b back: %+v", st)
	}

	// A target that never reported has nothing to mark.
	never := d.DeepCopy()
	delete(never.Annotations, workload.StatusAnnotationPrefix+"b")
	if MarkUnreachable(never, dead) != nil {
		t.Error("marked a report that does not exist")
	}
}

func TestHonestDuplicate(t *testing.T) {
	done := []appsv1.DeploymentCondition{cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable")}
	running := appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, Conditions: done}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 1, Labels: map[string]string{
		workload.StateLabelPrefix + "a": workload.StateSync, workload.StateLabelPrefix + "b": workload.StateSync},
		Annotations: map[string]string{
			workload.StatusAnnotationPrefix + "a": share(t, workload.ModeDuplicate, running),
			workload.StatusAnnotationPrefix + "b": share(t, workload.ModeDuplicate, running),
		}}}
	marked := MarkUnreachable(d, map[string]DeadTarget{"a": {Why: "root:compute/pc1: gone"}})
	st, _ := Aggregate(marked)
	if st.AvailableReplicas != 0 || available(st).Status != corev1.ConditionFalse || !strings.Contains(available(st).Message, "root:compute/pc1: gone") {
		t.Errorf("Duplicate with a dead copy: %+v", st)
	}
}

func TestHonestOneTarget(t *testing.T) {
	three := int32(3)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 2, Labels: map[string]string{workload.StateLabelPrefix + "a": workload.StateSync}},
		Spec: appsv1.DeploymentSpec{Replicas: &three},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, Conditions: []appsv1.DeploymentCondition{
			cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable"), cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable")}}}
	// One target reports status itself: no aggregation, and a Ready
	// target changes nothing.
	if _, ok := Aggregate(d); ok {
		t.Error("aggregated a Deployment on one target")
	}
	if MarkUnreachable(d, map[string]DeadTarget{"other": {Why: "x"}}) != nil {
		t.Error("a dead target it is not assigned to changed it")
	}
	why := "root:compute/pc1: no heartbeat from the syncer since 2026-01-02T03:03:45Z (timeout 20s)"
	marked := MarkUnreachable(d, map[string]DeadTarget{"a": {Why: why}})
	if marked == nil {
		t.Fatal("not marked")
	}
	st := marked.Status
	if st.ObservedGeneration != 2 || st.Replicas != 3 || st.UpdatedReplicas != 3 || st.ReadyReplicas != 0 || st.AvailableReplicas != 0 || st.UnavailableReplicas != 3 {
		t.Errorf("one dead target: %+v", st)
	}
	if c := available(st); c.Status != corev1.ConditionFalse || c.Reason != workload.ReasonSyncTargetNotReady || c.Message != why {
		t.Errorf("Available: %+v", c)
	}
	if len(st.Conditions) != 2 || st.Conditions[1].Reason != "NewReplicaSetAvailable" {
		t.Errorf("Progressing not kept: %+v", st.Conditions)
	}
	if MarkUnreachable(marked, map[string]DeadTarget{"a": {Why: why}}) != nil {
		t.Error("marked twice")
	}
	// Created while its target is dead: no status yet, still Available=False.
	fresh := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "new", Labels: d.Labels}}
	if m := MarkUnreachable(fresh, map[string]DeadTarget{"a": {Why: why}}); m == nil || available(m.Status) == nil || m.Status.UnavailableReplicas != 1 {
		t.Errorf("a new Deployment on a dead target: %+v", m)
	}
}

// TestMarkOncePerEpisode: kcp marks a Deployment once per NotReady episode
// of a target, so a syncer that writes after the mark is not fought over;
// a new episode marks again; a target Ready again is forgotten.
func TestMarkOncePerEpisode(t *testing.T) {
	c := &Controller{marked: map[string]map[string]string{},
		targets: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byTarget: func(obj interface{}) ([]string, error) {
			return []string{targetKeyOf(obj.(*unstructured.Unstructured))}, nil
		}})}
	setTarget := func(ready metav1.ConditionStatus, since time.Time) {
		st := &workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "pc1", Annotations: map[string]string{"kcp.io/cluster": "root:compute"}}}
		st.Status.Conditions = []metav1.Condition{{Type: workload.ConditionReady, Status: ready, Reason: workload.ReasonHeartbeatTimeout, Message: "no heartbeat", LastTransitionTime: metav1.NewTime(since)}}
		m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
		if err := c.targets.Update(&unstructured.Unstructured{Object: m}); err != nil {
			t.Fatal(err)
		}
	}
	key := workload.TargetKey("root:compute", "pc1")
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{workload.StateLabelPrefix + key: workload.StateSync}}}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	setTarget(metav1.ConditionTrue, t0)
	if dead := c.newlyDead("d", d); len(dead) != 0 {
		t.Errorf("Ready target dead: %v", dead)
	}
	setTarget(metav1.ConditionFalse, t0.Add(time.Minute))
	dead := c.newlyDead("d", d)
	if dead[key].Why != "root:compute/pc1: no heartbeat" {
		t.Fatalf("NotReady target: %v", dead)
	}
	c.remember("d", dead)
	if again := c.newlyDead("d", d); len(again) != 0 {
		t.Errorf("marked twice in one episode: %v", again)
	}
	// Another episode (Ready, then NotReady again) marks again.
	setTarget(metav1.ConditionTrue, t0.Add(2*time.Minute))
	if c.newlyDead("d", d); len(c.marked) != 0 {
		t.Errorf("a Ready target not forgotten: %v", c.marked)
	}
	setTarget(metav1.ConditionFalse, t0.Add(3*time.Minute))
	if again := c.newlyDead("d", d); len(again) != 1 {
		t.Errorf("a new episode not marked: %v", again)
	}
}
