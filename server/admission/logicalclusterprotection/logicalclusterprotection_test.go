package logicalclusterprotection

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/tenancy"
)

func TestValidate(t *testing.T) {
	p := &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
	server := &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
	masters := &user.DefaultInfo{Name: "ops", Groups: []string{user.SystemPrivilegedGroup}}
	tenant := &user.DefaultInfo{Name: "org-a-admin"}
	peer := &user.DefaultInfo{Name: "system:kcp:shard:root", Groups: []string{user.SystemPrivilegedGroup, "system:kcp:shards"}}
	lc := tenancy.LogicalClustersResource
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cases := []struct {
		name        string
		u           user.Info
		resource    schema.GroupVersionResource
		subresource string
		op          admission.Operation
		allowed     bool
	}{
		{"kcp creates", server, lc, "", admission.Create, true},
		{"kcp writes status", server, lc, "status", admission.Update, true},
		{"kcp deletes", server, lc, "", admission.Delete, true},
		{"tenant updates", tenant, lc, "", admission.Update, false},
		{"tenant writes status", tenant, lc, "status", admission.Update, false},
		{"tenant deletes", tenant, lc, "", admission.Delete, false},
		{"tenant creates", tenant, lc, "", admission.Create, false},
		{"system:masters updates", masters, lc, "", admission.Update, false},
		{"another shard creates", peer, lc, "", admission.Create, true},
		{"another shard deletes", peer, lc, "", admission.Delete, true},
		{"tenant writes something else", tenant, cm, "", admission.Update, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := admission.NewAttributesRecord(&unstructured.Unstructured{}, nil, schema.GroupVersionKind{}, "", tenancy.LogicalClusterName,
				c.resource, c.subresource, c.op, nil, false, c.u)
			err := p.Validate(context.Background(), a, nil)
			if c.allowed != (err == nil) {
				t.Fatalf("allowed = %v, want %v (%v)", err == nil, c.allowed, err)
			}
			if err != nil && !apierrors.IsForbidden(err) {
				t.Errorf("error is not Forbidden: %v", err)
			}
		})
	}
}
