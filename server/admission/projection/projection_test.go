package projection

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

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/viewidentity"
)

func obj(label string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Pod"}}
	u.SetName("p")
	if label != "" {
		u.SetLabels(map[string]string{workload.ProjectedFromLabel: label})
	}
	return u
}

func TestProjectionsAreReadOnly(t *testing.T) {
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	ctx := context.Background()
	req := httptest.NewRequest("GET", "/", nil)
	key := workload.TargetKey("root:compute", "east")
	syncer := &user.DefaultInfo{Name: "system:kcp:syncer:root:compute:east", Groups: []string{user.SystemPrivilegedGroup}}
	viewCtx := viewidentity.Continue(ctx, req, syncer, "/", url.Values{}).Context()
	otherView := viewidentity.Continue(ctx, req, &user.DefaultInfo{Name: "system:kcp:apiexport:root:p:x", Groups: []string{user.SystemPrivilegedGroup}}, "/", url.Values{}).Context()
	tenant := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	kcp := &user.DefaultInfo{Name: "system:apiserver", Groups: []string{user.SystemPrivilegedGroup}}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	rs := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	for _, c := range []struct {
		name     string
		ctx      context.Context
		who      user.Info
		gvr      schema.GroupVersionResource
		op       admission.Operation
		obj, old *unstructured.Unstructured
		ok       bool
	}{
		{"tenant's own pod", ctx, tenant, pods, admission.Create, obj(""), nil, true},
		{"tenant creates a labelled pod", ctx, tenant, pods, admission.Create, obj(key), nil, false},
		{"tenant creates a replicaset", ctx, tenant, rs, admission.Create, obj(""), nil, false},
		{"tenant updates a projected pod", ctx, tenant, pods, admission.Update, obj(key), obj(key), false},
		{"tenant removes the label", ctx, tenant, pods, admission.Update, obj(""), obj(key), false},
		{"syncer writes its own", viewCtx, syncer, pods, admission.Create, obj(key), nil, true},
		{"syncer updates its own replicaset", viewCtx, syncer, rs, admission.Update, obj(key), obj(key), true},
		{"syncer writes another's", viewCtx, syncer, pods, admission.Create, obj("other"), nil, false},
		{"syncer takes over another's", viewCtx, syncer, pods, admission.Update, obj(key), obj("other"), false},
		{"syncer writes an unlabelled replicaset", viewCtx, syncer, rs, admission.Create, obj(""), nil, false},
		{"another view", otherView, &user.DefaultInfo{Name: "system:kcp:apiexport:root:p:x", Groups: []string{user.SystemPrivilegedGroup}}, rs, admission.Create, obj(key), nil, false},
		{"a tenant named like the syncer", ctx, &user.DefaultInfo{Name: syncer.Name}, pods, admission.Create, obj(key), nil, false},
		{"kcp's garbage collector", ctx, kcp, rs, admission.Update, obj(key), obj(key), true},
	} {
		var old runtime.Object
		if c.old != nil {
			old = c.old
		}
		a := admission.NewAttributesRecord(c.obj, old, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "default", "p", c.gvr, "", c.op, nil, false, c.who)
		err := p.Validate(c.ctx, a, nil)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed=%v", c.name, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "read-only") && !strings.Contains(err.Error(), "only its own") {
			t.Errorf("%s: the message does not explain itself: %v", c.name, err)
		}
	}
}
