package workspaceowner

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/tenancy"
)

func workspace(owner string, finalizers ...string) *unstructured.Unstructured {
	ws := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace"}}
	ws.SetName("org-a")
	if owner != "" {
		ws.SetAnnotations(map[string]string{tenancy.OwnerAnnotation: owner})
	}
	ws.SetFinalizers(finalizers)
	return ws
}

// TestUpdateKeepsWhatTheSystemOwns: an update may not change the recorded
// owner, and only kcp or system:masters may remove the finalizer.
func TestUpdateKeepsWhatTheSystemOwns(t *testing.T) {
	p := &plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	cases := []struct {
		name          string
		u             user.Info
		wantFinalizer bool
	}{
		{"the creator strips the finalizer", &user.DefaultInfo{Name: "creator"}, true},
		{"kcp removes it when the cluster is gone", &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}, false},
		{"an operator forces it off", &user.DefaultInfo{Name: "ops", Groups: []string{user.SystemPrivilegedGroup}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := workspace(`{"username":"creator"}`, tenancy.WorkspaceFinalizer, "other/finalizer")
			obj := workspace(`{"username":"someone-else"}`)
			a := admission.NewAttributesRecord(obj, old, schema.GroupVersionKind{}, "", "org-a", tenancy.WorkspacesResource, "", admission.Update, nil, false, c.u)
			if err := p.Admit(context.Background(), a, nil); err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(obj.GetFinalizers(), tenancy.WorkspaceFinalizer); got != c.wantFinalizer {
				t.Errorf("finalizer kept = %v, want %v (%v)", got, c.wantFinalizer, obj.GetFinalizers())
			}
			if slices.Contains(obj.GetFinalizers(), "other/finalizer") {
				t.Errorf("a finalizer that is not kcp's was put back: %v", obj.GetFinalizers())
			}
			if got := obj.GetAnnotations()[tenancy.OwnerAnnotation]; got != `{"username":"creator"}` {
				t.Errorf("owner = %s", got)
			}
		})
	}
}

// TestValidateRefusesAChangedRecord: what Admit recorded must reach
// storage unchanged; a later mutation (a tenant's mutating webhook in the
// parent runs after this plugin) that names another owner is refused, on
// create and on update.
func TestValidateRefusesAChangedRecord(t *testing.T) {
	p := &plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	creator := &user.DefaultInfo{Name: "creator", Groups: []string{"team"}}
	for _, op := range []admission.Operation{admission.Create, admission.Update} {
		for _, forge := range []bool{false, true} {
			obj := workspace("")
			var old *unstructured.Unstructured
			if op == admission.Update {
				old = workspace(`{"username":"creator"}`)
			}
			a := admission.NewAttributesRecord(obj, old, schema.GroupVersionKind{}, "", "org-a", tenancy.WorkspacesResource, "", op, nil, false, creator)
			if err := p.Admit(context.Background(), a, nil); err != nil {
				t.Fatal(err)
			}
			if forge {
				obj.SetAnnotations(map[string]string{tenancy.OwnerAnnotation: `{"username":"mallory"}`})
			}
			err := p.Validate(context.Background(), a, nil)
			if forge && !apierrors.IsForbidden(err) {
				t.Errorf("%s with the owner rewritten after admission: want forbidden, got %v", op, err)
			}
			if !forge && err != nil {
				t.Errorf("%s as admitted: %v", op, err)
			}
		}
	}
}
