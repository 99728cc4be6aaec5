package placement

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/workload"
)

func targetWith(t *testing.T, taints ...workload.Taint) *unstructured.Unstructured {
	st := &workload.SyncTarget{TypeMeta: metav1.TypeMeta{APIVersion: "workload.kcp.io/v1alpha1", Kind: "SyncTarget"}, ObjectMeta: metav1.ObjectMeta{Name: "pc1"}}
	st.Spec.Taints = taints
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

func targetUpdate(obj, old *unstructured.Unstructured, who user.Info) admission.Attributes {
	return admission.NewAttributesRecord(obj, old, workload.SyncTargetsResource.GroupVersion().WithKind("SyncTarget"), "", "pc1",
		workload.SyncTargetsResource, "", admission.Update, &metav1.UpdateOptions{}, false, who)
}

// TestTaintAdmission: kcp sets timeAdded (a forged one is replaced, a kept
// taint keeps its time), kcp's taints are kept when left out and refused
// when changed by anyone but kcp.
func TestTaintAdmission(t *testing.T) {
	admin := &user.DefaultInfo{Name: "ops"}
	kcp := &user.DefaultInfo{Name: "system:kcp", Groups: []string{user.SystemPrivilegedGroup}}
	long := metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	before := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	notReady := workload.Taint{Key: workload.TaintNotReady, Effect: workload.TaintNoExecute, TimeAdded: &before}
	old := targetWith(t, workload.Taint{Key: "kept", Effect: workload.TaintNoExecute, TimeAdded: &before}, notReady)

	// A forged timeAdded on a new taint is replaced; the kept one keeps
	// its own; kcp's, left out, comes back.
	obj := targetWith(t, workload.Taint{Key: "kept", Effect: workload.TaintNoExecute, TimeAdded: &long},
		workload.Taint{Key: "new", Effect: workload.TaintNoExecute, TimeAdded: &long})
	a := targetUpdate(obj, old, admin)
	admitTaints(a)
	got, _ := decodeTaints(obj)
	if len(got) != 3 || !got[0].TimeAdded.Equal(&before) || got[1].TimeAdded.Time.Before(time.Now().Add(-time.Minute)) || got[2].Key != workload.TaintNotReady || !got[2].TimeAdded.Equal(&before) {
		t.Errorf("admitted taints: %+v", got)
	}
	if err := validateTaints(a); err != nil {
		t.Errorf("leaving kcp's taint out: %v", err)
	}

	// Changing kcp's taint: refused, but for kcp (its timeAdded, like any
	// taint's, is kcp's to set: a forged one is replaced, above).
	changed := notReady
	changed.Value = "x"
	for _, who := range []user.Info{admin, kcp} {
		obj = targetWith(t, changed)
		a = targetUpdate(obj, old, who)
		admitTaints(a)
		err := validateTaints(a)
		if refused := err != nil && strings.Contains(err.Error(), "are kcp's"); refused != (who == admin) {
			t.Errorf("%s changing kcp's taint: %v", who.GetName(), err)
		}
	}

	for _, c := range []struct {
		taint workload.Taint
		want  string
	}{
		{workload.Taint{Key: "a b", Effect: workload.TaintNoSchedule}, "key"},
		{workload.Taint{Key: "a", Value: "not valid!", Effect: workload.TaintNoSchedule}, "value"},
		{workload.Taint{Key: "a", Effect: "Never"}, "effect"},
		{workload.Taint{Key: "a", Effect: workload.TaintNoSchedule, TolerableBy: []string{"root:ml"}}, "reserved taints only"},
		{workload.Taint{Key: workload.TaintUnschedulable, Effect: workload.TaintNoSchedule, Reserved: true}, "cannot be reserved"},
	} {
		a := targetUpdate(targetWith(t, c.taint), targetWith(t, c.taint), kcp)
		if err := validateTaints(a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.taint, err, c.want)
		}
	}
	dup := targetWith(t, workload.Taint{Key: "a", Effect: workload.TaintNoSchedule}, workload.Taint{Key: "a", Value: "b", Effect: workload.TaintNoSchedule})
	if err := validateTaints(targetUpdate(dup, dup, kcp)); err == nil || !strings.Contains(err.Error(), "a second taint") {
		t.Errorf("duplicate: %v", err)
	}
}
