package pushsecret

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// readers: "alice" may get Secrets in namespace "infra", everyone (views'
// identities too: they are system:masters) in "public".
var readers = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetResource() == "secrets" && a.GetVerb() == "get" &&
		(a.GetNamespace() == "public" || (a.GetNamespace() == "infra" && a.GetUser().GetName() == "alice") ||
			strings.HasPrefix(a.GetUser().GetName(), "system:kcp:")) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
})

func target(ns, name, rec string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "workload.kcp.io/v1alpha1", "kind": "SyncTarget", "metadata": map[string]interface{}{"name": "pc1"}}}
	if name != "" {
		_ = unstructured.SetNestedField(u.Object, ns, "spec", "push", "secretNamespace")
		_ = unstructured.SetNestedField(u.Object, name, "spec", "push", "secretName")
	}
	if rec != "" {
		u.SetAnnotations(map[string]string{workload.PushSecretCheckedAnnotation: rec})
	}
	return u
}

// run admits and validates like the server, with mutate between the two
// (a later mutating webhook); it returns the error and the stored record.
func run(ctx context.Context, p *Plugin, op admission.Operation, obj, old *unstructured.Unstructured, who string, mutate func(*unstructured.Unstructured)) (string, error) {
	var oldObj runtime.Object
	if old != nil {
		oldObj = old
	}
	a := admission.NewAttributesRecord(obj, oldObj, schema.GroupVersionKind{Group: workload.Group, Version: workload.Version, Kind: "SyncTarget"}, "", "pc1",
		workload.SyncTargetsResource, "", op, nil, false, &user.DefaultInfo{Name: who})
	if err := p.Admit(ctx, a, nil); err != nil {
		return "", err
	}
	if mutate != nil {
		mutate(obj)
	}
	if err := p.Validate(ctx, a, nil); err != nil {
		return "", err
	}
	return obj.GetAnnotations()[workload.PushSecretCheckedAnnotation], nil
}

func TestPushSecretRows(t *testing.T) {
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	p.SetAuthorizer(readers)
	ctx := logicalcluster.WithCluster(context.Background(), "root:compute")
	req := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	viewCtx := viewidentity.Continue(ctx, req, &user.DefaultInfo{Name: "system:kcp:apiexport:root:p:x", Groups: []string{user.SystemPrivilegedGroup}}, "/", url.Values{}).Context()
	repoint := func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "other", "spec", "push", "secretName")
	}
	for _, c := range []struct {
		what    string
		ctx     context.Context
		op      admission.Operation
		obj     *unstructured.Unstructured
		old     *unstructured.Unstructured
		who     string
		mutate  func(*unstructured.Unstructured)
		refused string
		record  string
	}{
		{"bob names infra/kc at create", ctx, admission.Create, target("infra", "kc", ""), nil, "bob", nil, `"bob" may not name Secret infra/kc in spec.push`, ""},
		{"alice names infra/kc at create, forged record replaced", ctx, admission.Create, target("infra", "kc", "infra/other"), nil, "alice", nil, "", "infra/kc"},
		{"a view's identity names public/kc", viewCtx, admission.Create, target("public", "kc", ""), nil, "system:kcp:apiexport:root:p:x", nil, "cannot be set through a view", ""},
		{"bob repoints alice's target", ctx, admission.Update, target("infra", "other", "infra/kc"), target("infra", "kc", "infra/kc"), "bob", nil, `may not name Secret infra/other`, ""},
		{"bob labels alice's target", ctx, admission.Update, target("infra", "kc", ""), target("infra", "kc", "infra/kc"), "bob", nil, "", "infra/kc"},
		{"bob forges the record", ctx, admission.Update, target("public", "kc", "infra/kc"), target("public", "kc", "public/kc"), "bob", nil, "", "public/kc"},
		{"bob removes push", ctx, admission.Update, target("", "", "infra/kc"), target("infra", "kc", "infra/kc"), "bob", nil, "", ""},
		{"a later mutation repoints after admission", ctx, admission.Create, target("public", "kc", ""), nil, "bob", repoint, "is kcp's record", ""},
		{"a later mutation forges the record", ctx, admission.Update, target("public", "kc", ""), target("public", "kc", "public/kc"), "bob",
			func(u *unstructured.Unstructured) {
				u.SetAnnotations(map[string]string{workload.PushSecretCheckedAnnotation: "infra/kc"})
			}, "is kcp's record", ""},
		{"legacy target (no record) updated by bob stays unchecked", ctx, admission.Update, target("infra", "kc", ""), target("infra", "kc", ""), "bob", nil, "", ""},
		{"legacy target (no record) updated by alice is recorded", ctx, admission.Update, target("infra", "kc", ""), target("infra", "kc", ""), "alice", nil, "", "infra/kc"},
	} {
		rec, err := run(c.ctx, p, c.op, c.obj, c.old, c.who, c.mutate)
		switch {
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: want refused (%s), got %v", c.what, c.refused, err)
		case c.refused == "" && err != nil:
			t.Errorf("%s: %v", c.what, err)
		case c.refused == "" && rec != c.record:
			t.Errorf("%s: record %q, want %q", c.what, rec, c.record)
		}
	}
}
