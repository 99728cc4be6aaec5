package placement

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/workload"
)

func placementWith(t *testing.T, expr string) *unstructured.Unstructured {
	p := &workload.Placement{TypeMeta: metav1.TypeMeta{APIVersion: "workload.kcp.io/v1alpha1", Kind: "Placement"}, ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: workload.PlacementSpec{LocationWorkspace: "root:compute", LocationExpression: expr}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

// TestExpressionAdmission: a bad locationExpression is refused with CEL's
// error on create and on an update that changes nothing else (which skips
// the location checks).
func TestExpressionAdmission(t *testing.T) {
	who := &user.DefaultInfo{Name: "alice"}
	for expr, want := range map[string]string{
		`target.labels.region ==`: "spec.locationExpression does not compile",
		`target.nodes`:            "spec.locationExpression must evaluate to a bool, not int",
		`target.labels.all(a, target.labels.all(b, target.labels.all(c, a + b + c != "")))`: "spec.locationExpression estimated cost",
	} {
		obj := placementWith(t, expr)
		create := admission.NewAttributesRecord(obj, nil, workload.PlacementsResource.GroupVersion().WithKind("Placement"), "", "p",
			workload.PlacementsResource, "", admission.Create, &metav1.CreateOptions{}, false, who)
		if err := (&Plugin{}).validatePlacement(context.Background(), create); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("create %s: %v, want %q", expr, err, want)
		}
		update := admission.NewAttributesRecord(obj, placementWith(t, `true`), workload.PlacementsResource.GroupVersion().WithKind("Placement"), "", "p",
			workload.PlacementsResource, "", admission.Update, &metav1.UpdateOptions{}, false, who)
		if err := (&Plugin{}).validatePlacement(context.Background(), update); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("update to %s: %v, want %q", expr, err, want)
		}
	}
	// A good expression passes on an update that changes nothing else.
	update := admission.NewAttributesRecord(placementWith(t, `target.readyNodes > 0`), placementWith(t, `true`), workload.PlacementsResource.GroupVersion().WithKind("Placement"), "", "p",
		workload.PlacementsResource, "", admission.Update, &metav1.UpdateOptions{}, false, who)
	if err := (&Plugin{}).validatePlacement(context.Background(), update); err != nil {
		t.Errorf("good update: %v", err)
	}
}
