package workspacelimits

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func deletion(name string, dryRun bool) admission.Attributes {
	cm := &corev1.ConfigMap{}
	cm.Name = name
	return admission.NewAttributesRecord(nil, cm, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "default", name,
		schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "", admission.Delete, nil, dryRun, nil)
}

func createDry(name string) admission.Attributes {
	cm := &corev1.ConfigMap{}
	cm.Name = name
	return admission.NewAttributesRecord(cm, nil, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "default", name,
		schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "", admission.Create, nil, true, nil)
}

// TestDeletionsDoNotLowerTheCount is issue 49's "limits leak": dry-run
// deletions (and deletions that are then not carried out) must not make
// room; a deletion that was stored does, at once; dry-run creates take no
// room.
func TestDeletionsDoNotLowerTheCount(t *testing.T) {
	var stored atomic.Int64
	stored.Store(12)
	var counted atomic.Int32
	Configure(&Config{
		Defaults: tenancy.Limits{Objects: 12},
		Limits:   func(logicalcluster.Name) tenancy.Limits { return tenancy.Limits{} },
		Count: func(context.Context, logicalcluster.Name) (int64, int64, error) {
			counted.Add(1)
			return stored.Load(), 0, nil
		},
	})
	defer Configure(nil)
	ctx := logicalcluster.WithCluster(context.Background(), "root:leak")
	admitted := 0
	for range 25 {
		if err := instance.Validate(ctx, deletion("x", true), nil); err != nil {
			t.Fatalf("a dry-run deletion: %v", err)
		}
		if err := instance.Validate(ctx, create("c"), nil); err == nil {
			admitted++
			stored.Add(1)
		} else if !strings.Contains(err.Error(), "stores 12 objects, its limit") {
			t.Fatalf("refusal: %v", err)
		}
	}
	if admitted != 0 {
		t.Errorf("dry-run deletions let %d creates past a full workspace", admitted)
	}
	// A deletion admitted but then not carried out (a webhook refused it):
	// the count read again still says full.
	for range 5 {
		_ = instance.Validate(ctx, deletion("x", false), nil)
		if err := instance.Validate(ctx, create("c"), nil); err == nil {
			t.Fatalf("a deletion that did not happen made room")
		}
	}
	// A deletion that was stored makes room at once, for one create.
	_ = instance.Validate(ctx, deletion("x", false), nil)
	stored.Add(-1)
	if err := instance.Validate(ctx, create("c"), nil); err != nil {
		t.Fatalf("a create after a stored deletion: %v", err)
	}
	stored.Add(1)
	if err := instance.Validate(ctx, create("d"), nil); err == nil {
		t.Errorf("a second create after one deletion was admitted")
	}
	// Dry-run creates take no room.
	stored.Add(-3)
	_ = instance.Validate(ctx, deletion("x", false), nil)
	for i := range 10 {
		if err := instance.Validate(ctx, createDry("dry"), nil); err != nil {
			t.Fatalf("dry-run create %d with 3 free: %v", i, err)
		}
	}
	if counted.Load() > 20 {
		t.Errorf("the count was read %d times", counted.Load())
	}
}

// rbac allows "update" and "delete" on workspaces to the user
// "parent-admin" only, and everything else but that to everyone (entering
// root:org included).
var rbac = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if (a.GetVerb() == "update" || a.GetVerb() == "delete") && a.GetResource() == "workspaces" && a.GetUser().GetName() != "parent-admin" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	return authorizer.DecisionAllow, "", nil
})

func workspace(name string, objects int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": map[string]interface{}{"name": name}}}
	if objects > 0 {
		_ = unstructured.SetNestedField(u.Object, objects, "spec", "limits", "objects")
	}
	return u
}

// TestLimitsNeedTheParent: spec.limits set at create or changed by an
// update needs the parent's "update"; other updates do not ask.
func TestLimitsNeedTheParent(t *testing.T) {
	// The real cluster-aware authorizer: its owner rule lets "creator"
	// update its Workspace root:org/team, which must not count here.
	z := clusterauthz.Authorizer{Delegate: rbac, Clusters: rbac, Owner: func(c logicalcluster.Name) string {
		if c == "root:org:team" {
			return "creator"
		}
		return ""
	}}
	if d, _, _ := z.Authorize(logicalcluster.WithCluster(context.Background(), "root:org"), authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: "creator"}, Verb: "patch", APIGroup: tenancy.Group, Resource: "workspaces", Name: "team", ResourceRequest: true}); d != authorizer.DecisionAllow {
		t.Fatalf("the owner rule does not let the creator patch its Workspace")
	}
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), counts: map[logicalcluster.Name]*count{}}
	p.SetAuthorizer(z)
	ctx := logicalcluster.WithCluster(context.Background(), "root:org")
	gvr := tenancy.WorkspacesResource
	gvk := schema.GroupVersionKind{Group: tenancy.Group, Version: tenancy.Version, Kind: "Workspace"}
	attrs := func(op admission.Operation, obj, old *unstructured.Unstructured, who string) admission.Attributes {
		var o admission.Attributes
		if old == nil {
			o = admission.NewAttributesRecord(obj, nil, gvk, "", "team", gvr, "", op, nil, false, &user.DefaultInfo{Name: who})
		} else {
			o = admission.NewAttributesRecord(obj, old, gvk, "", "team", gvr, "", op, nil, false, &user.DefaultInfo{Name: who})
		}
		return o
	}
	for _, c := range []struct {
		what     string
		a        admission.Attributes
		refused  bool
		contains string
	}{
		{"creator sets limits at create", attrs(admission.Create, workspace("team", 100000), nil, "creator"), true, `"creator" may not set spec.limits of workspace root:org:team`},
		{"creator creates without limits", attrs(admission.Create, workspace("team", 0), nil, "creator"), false, ""},
		{"owner lifts limits", attrs(admission.Update, workspace("team", 100000), workspace("team", 8), "creator"), true, "verb \"update\""},
		{"owner removes limits", attrs(admission.Update, workspace("team", 0), workspace("team", 8), "creator"), true, "parent's decision"},
		{"owner updates something else", attrs(admission.Update, workspace("team", 8), workspace("team", 8), "creator"), false, ""},
		{"parent's admin changes limits", attrs(admission.Update, workspace("team", 100000), workspace("team", 8), "parent-admin"), false, ""},
	} {
		err := p.Validate(ctx, c.a, nil)
		if (err != nil) != c.refused || (err != nil && !strings.Contains(err.Error(), c.contains)) {
			t.Errorf("%s: %v", c.what, err)
		}
	}
}
