package sharestatus

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
)

func share(t *testing.T, mode string, st appsv1.DeploymentStatus) string {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(workload.ShareStatus{Mode: mode, Status: u})
	return string(raw)
}

func cond(typ appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason string) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: typ, Status: status, Reason: reason}
}

func TestAggregate(t *testing.T) {
	done := []appsv1.DeploymentCondition{cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable"), cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable")}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 3, Labels: map[string]string{
		workload.StateLabelPrefix + "a": workload.StateSync, workload.StateLabelPrefix + "b": workload.StateSync, "app": "web"}}}
	d.Status.ObservedGeneration = 2

	// One target only: not this controller's business.
	one := d.DeepCopy()
	delete(one.Labels, workload.StateLabelPrefix+"b")
	if _, ok := Aggregate(one); ok {
		t.Error("a Deployment on one target was aggregated")
	}
	if _, ok := Aggregate(d); ok {
		t.Error("aggregated before any target reported")
	}

	// Divide with only a's report: no sum of some shares.
	d.Annotations = map[string]string{workload.StatusAnnotationPrefix + "a": share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, AvailableReplicas: 4})}
	if st, ok := Aggregate(d); ok {
		t.Errorf("Divide aggregated with b not reported: %+v", st)
	}

	// Divide: a has rolled out 4 of 4, b 1 of 2 so far.
	d.Annotations = map[string]string{
		workload.StatusAnnotationPrefix + "a": share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 4, AvailableReplicas: 4, Conditions: done}),
		workload.StatusAnnotationPrefix + "b": share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UnavailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{cond(appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable"), cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "ReplicaSetUpdated")}}),
	}
	st, ok := Aggregate(d)
	if !ok || st.Replicas != 6 || st.UpdatedReplicas != 5 || st.ReadyReplicas != 5 || st.AvailableReplicas != 5 || st.UnavailableReplicas != 1 || st.ObservedGeneration != 3 {
		t.Fatalf("Divide: %+v", st)
	}
	if st.Conditions[0].Status != corev1.ConditionFalse || st.Conditions[1].Reason != "ReplicaSetUpdated" {
		t.Errorf("Divide conditions while b rolls out: %+v", st.Conditions)
	}

	// b catches up: Available, done.
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, Conditions: done})
	st, _ = Aggregate(d)
	if st.AvailableReplicas != 6 || st.Conditions[0].Status != corev1.ConditionTrue || st.Conditions[1].Reason != "NewReplicaSetAvailable" {
		t.Errorf("Divide, all done: %+v", st)
	}

	// A rebalancing: b joined and starts its share while a still runs all
	// 6 (its old share): the whole is available, though b's copy is not.
	six := int32(6)
	d.Spec.Replicas = &six
	d.Annotations[workload.StatusAnnotationPrefix+"a"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 6, UpdatedReplicas: 6, ReadyReplicas: 6, AvailableReplicas: 6, Conditions: done})
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 3, UnavailableReplicas: 3,
		Conditions: []appsv1.DeploymentCondition{cond(appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable"), cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "ReplicaSetUpdated")}})
	if st, _ = Aggregate(d); st.AvailableReplicas != 6 || st.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("a joining cluster made the whole unavailable: %+v", st)
	}
	// ... but not when the sum falls short.
	d.Annotations[workload.StatusAnnotationPrefix+"a"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 6, UpdatedReplicas: 6, AvailableReplicas: 5, Conditions: done})
	if st, _ = Aggregate(d); st.Conditions[0].Status != corev1.ConditionFalse {
		t.Errorf("5 of 6 available, Available: %+v", st.Conditions[0])
	}
	d.Spec.Replicas = nil

	// A target that has not observed generation 3 holds observedGeneration back.
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, Conditions: done})
	if st, _ = Aggregate(d); st.ObservedGeneration != 2 {
		t.Errorf("observedGeneration with one target behind: %d", st.ObservedGeneration)
	}

	// Duplicate: the least of each.
	d.Annotations[workload.StatusAnnotationPrefix+"a"] = share(t, workload.ModeDuplicate, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3, Conditions: done})
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = share(t, workload.ModeDuplicate, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 1, Conditions: done})
	if st, _ = Aggregate(d); st.Replicas != 3 || st.AvailableReplicas != 1 {
		t.Errorf("Duplicate: %+v", st)
	}

	// A stuck rollout anywhere is reported.
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = share(t, workload.ModeDuplicate, appsv1.DeploymentStatus{ObservedGeneration: 3,
		Conditions: []appsv1.DeploymentCondition{cond(appsv1.DeploymentProgressing, corev1.ConditionFalse, "ProgressDeadlineExceeded")}})
	if st, _ = Aggregate(d); st.Conditions[1].Status != corev1.ConditionFalse || st.Conditions[1].Reason != "ProgressDeadlineExceeded" {
		t.Errorf("stuck: %+v", st.Conditions)
	}

	// An annotation of a target no longer assigned counts for nothing.
	d.Annotations[workload.StatusAnnotationPrefix+"gone"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{Replicas: 100})
	d.Annotations[workload.StatusAnnotationPrefix+"b"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2})
	d.Annotations[workload.StatusAnnotationPrefix+"a"] = share(t, workload.ModeDivide, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4})
	if st, _ = Aggregate(d); st.Replicas != 6 {
		t.Errorf("a stale annotation counted: %d", st.Replicas)
	}
}
