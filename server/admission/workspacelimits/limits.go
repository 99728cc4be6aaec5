package workspacelimits

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// LimitsVerb is the verb on workspaces, in the parent, that setting or
// changing a Workspace's spec.limits needs; it must come from the parent's
// RBAC (or system:masters), not from owning the workspace.
const LimitsVerb = "update"

// limitsOf reads spec.limits of a Workspace (zero: none).
func limitsOf(obj runtime.Object) (tenancy.Limits, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u == nil {
		return tenancy.Limits{}, nil
	}
	raw, found, err := unstructured.NestedMap(u.Object, "spec", "limits")
	if err != nil || !found {
		return tenancy.Limits{}, err
	}
	var l tenancy.Limits
	err = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &l)
	return l, err
}

// validateLimits: a Workspace created with spec.limits, or an update that
// changes them, needs LimitsVerb on that Workspace by the parent's RBAC,
// checked for the requester without clusterauthz's owner rule. Dry runs
// are checked alike (they answer what the real request would get).
func (p *Plugin) validateLimits(ctx context.Context, a admission.Attributes) error {
	if a.GetResource().GroupResource() != tenancy.WorkspacesResource.GroupResource() || a.GetSubresource() != "" ||
		(a.GetOperation() != admission.Create && a.GetOperation() != admission.Update) {
		return nil
	}
	parent, ok := logicalcluster.From(ctx)
	if !ok || parent.IsWildcard() {
		return nil
	}
	want, err := limitsOf(a.GetObject())
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("spec.limits: %v", err))
	}
	var was tenancy.Limits
	if a.GetOperation() == admission.Update {
		if was, err = limitsOf(a.GetOldObject()); err != nil {
			return admission.NewForbidden(a, fmt.Errorf("spec.limits: %v", err))
		}
	}
	if want == was {
		return nil
	}
	wsName := a.GetName()
	if o, err := meta.Accessor(a.GetObject()); err == nil && o.GetName() != "" {
		wsName = o.GetName() // generateName: named by now
	}
	if p.authz == nil {
		return admission.NewForbidden(a, fmt.Errorf("workspace limits cannot be checked yet (the server is starting); try again"))
	}
	attr := authorizer.AttributesRecord{
		User: a.GetUserInfo(), Verb: LimitsVerb, APIGroup: tenancy.Group, APIVersion: tenancy.Version,
		Resource: "workspaces", Name: wsName, ResourceRequest: true,
	}
	d, _, err := p.authz.Authorize(clusterauthz.WithoutOwnerRule(logicalcluster.WithCluster(ctx, parent)), attr)
	if err == nil && d == authorizer.DecisionAllow {
		return nil
	}
	name := ""
	if a.GetUserInfo() != nil {
		name = a.GetUserInfo().GetName()
	}
	return admission.NewForbidden(a, fmt.Errorf("%q may not set spec.limits of workspace %s: the limits are the parent's decision and need the verb %q on "+
		"workspaces.%s/%s granted by the RBAC of %s (creating or owning the workspace is not enough)", name, parent.Join(wsName), LimitsVerb, tenancy.Group, wsName, parent))
}
