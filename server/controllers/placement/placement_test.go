package placement

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
)

func TestReconcileAssignment(t *testing.T) {
	pc1, pc2 := workload.StateLabel("root:compute", "pc1"), workload.StateLabel("root:compute", "pc2")
	f1, f2 := workload.Finalizer("root:compute", "pc1"), workload.Finalizer("root:compute", "pc2")
	ns := func(labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: labels}}
	}
	obj := func(labels map[string]string, finalizers ...string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]interface{}{}}
		o.SetLabels(labels)
		o.SetFinalizers(finalizers)
		return o
	}

	// Assigned namespace: label and finalizer added, user labels kept.
	o := obj(map[string]string{"app": "web"}, "user/keep")
	if !reconcileAssignment(o, ns(map[string]string{pc1: workload.StateSync})) {
		t.Fatal("no change reported")
	}
	if o.GetLabels()[pc1] != workload.StateSync || o.GetLabels()["app"] != "web" || !slices.Equal(o.GetFinalizers(), []string{"user/keep", f1}) {
		t.Errorf("assigned: %v %v", o.GetLabels(), o.GetFinalizers())
	}
	if reconcileAssignment(o, ns(map[string]string{pc1: workload.StateSync})) {
		t.Error("a second pass reports a change")
	}

	// Moved to pc2: pc1's label and finalizer go, pc2's come.
	if !reconcileAssignment(o, ns(map[string]string{pc2: workload.StateSync})) {
		t.Fatal("no change reported")
	}
	if _, ok := o.GetLabels()[pc1]; ok || o.GetLabels()[pc2] != workload.StateSync || !slices.Equal(o.GetFinalizers(), []string{"user/keep", f2}) {
		t.Errorf("moved: %v %v", o.GetLabels(), o.GetFinalizers())
	}

	// Unassigned: everything of the syncers goes, the rest stays.
	reconcileAssignment(o, ns(nil))
	if len(o.GetLabels()) != 1 || !slices.Equal(o.GetFinalizers(), []string{"user/keep"}) {
		t.Errorf("unassigned: %v %v", o.GetLabels(), o.GetFinalizers())
	}

	// An object being deleted gets no new finalizer.
	d := obj(nil)
	now := metav1.Now()
	d.SetDeletionTimestamp(&now)
	if reconcileAssignment(d, ns(map[string]string{pc1: workload.StateSync})) || len(d.GetFinalizers()) != 0 {
		t.Errorf("a deleting object was assigned: %v", d.GetFinalizers())
	}
}
