package workspacelimits

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func frozenWorkspace(name string, frozen map[string]interface{}) *unstructured.Unstructured {
	u := workspace(name, 0)
	if frozen != nil {
		_ = unstructured.SetNestedField(u.Object, frozen, "spec", "frozen")
	}
	return u
}

// TestFreezeNeedsTheParent: freezing, changing the reason and unfreezing
// need the parent's "update" (the creator's owner rule is not enough); a
// blank or too long reason is refused; other updates of a frozen
// Workspace do not ask.
func TestFreezeNeedsTheParent(t *testing.T) {
	z := clusterauthz.Authorizer{Delegate: rbac, Clusters: rbac, Owner: func(c logicalcluster.Name) string {
		if c == "root:org:team" {
			return "creator"
		}
		return ""
	}}
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), counts: map[logicalcluster.Name]*count{}}
	p.SetAuthorizer(z)
	ctx := logicalcluster.WithCluster(context.Background(), "root:org")
	gvk := schema.GroupVersionKind{Group: tenancy.Group, Version: tenancy.Version, Kind: "Workspace"}
	attrs := func(op admission.Operation, obj, old *unstructured.Unstructured, who string) admission.Attributes {
		if obj == nil {
			return admission.NewAttributesRecord(nil, old, gvk, "", "team", tenancy.WorkspacesResource, "", op, nil, false, &user.DefaultInfo{Name: who})
		}
		if old == nil {
			return admission.NewAttributesRecord(obj, nil, gvk, "", "team", tenancy.WorkspacesResource, "", op, nil, false, &user.DefaultInfo{Name: who})
		}
		return admission.NewAttributesRecord(obj, old, gvk, "", "team", tenancy.WorkspacesResource, "", op, nil, false, &user.DefaultInfo{Name: who})
	}
	incident := map[string]interface{}{"reason": "incident 4711"}
	other := map[string]interface{}{"reason": "incident 4712"}
	for _, c := range []struct {
		what     string
		a        admission.Attributes
		refused  bool
		contains string
	}{
		{"creator creates it frozen", attrs(admission.Create, frozenWorkspace("team", incident), nil, "creator"), true, `"creator" may not freeze workspace root:org:team`},
		{"owner unfreezes", attrs(admission.Update, frozenWorkspace("team", nil), frozenWorkspace("team", incident), "creator"), true, `"creator" may not unfreeze workspace root:org:team: a freeze is the parent's decision`},
		{"owner changes the reason", attrs(admission.Update, frozenWorkspace("team", other), frozenWorkspace("team", incident), "creator"), true, "verb \"update\""},
		{"owner freezes", attrs(admission.Update, frozenWorkspace("team", incident), frozenWorkspace("team", nil), "creator"), true, "owning the workspace is not enough"},
		{"owner updates something else of a frozen one", attrs(admission.Update, frozenWorkspace("team", incident), frozenWorkspace("team", incident), "creator"), false, ""},
		{"parent's admin freezes", attrs(admission.Update, frozenWorkspace("team", incident), frozenWorkspace("team", nil), "parent-admin"), false, ""},
		{"parent's admin unfreezes", attrs(admission.Update, frozenWorkspace("team", nil), frozenWorkspace("team", incident), "parent-admin"), false, ""},
		{"parent's admin creates it frozen", attrs(admission.Create, frozenWorkspace("team", incident), nil, "parent-admin"), false, ""},
		{"owner deletes it frozen", attrs(admission.Delete, nil, frozenWorkspace("team", incident), "creator"), true, `"creator" may not delete workspace root:org:team, which is frozen (incident 4711)`},
		{"owner deletes it unfrozen", attrs(admission.Delete, nil, frozenWorkspace("team", nil), "creator"), false, ""},
		{"a blank reason", attrs(admission.Update, frozenWorkspace("team", map[string]interface{}{"reason": "  "}), frozenWorkspace("team", nil), "parent-admin"), true, "must say why"},
		{"no reason", attrs(admission.Update, frozenWorkspace("team", map[string]interface{}{}), frozenWorkspace("team", nil), "parent-admin"), true, "must say why"},
		{"a long reason", attrs(admission.Update, frozenWorkspace("team", map[string]interface{}{"reason": strings.Repeat("é", 257)}), frozenWorkspace("team", nil), "parent-admin"), true, "257 characters long, at most 256"},
	} {
		err := p.Validate(ctx, c.a, nil)
		if (err != nil) != c.refused || (err != nil && !strings.Contains(err.Error(), c.contains)) {
			t.Errorf("%s: %v", c.what, err)
		}
	}
}
