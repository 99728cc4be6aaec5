package workspacelimits

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// frozenOf reads spec.frozen of a Workspace: whether it is set, and its
// reason.
func frozenOf(obj runtime.Object) (reason string, set bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u == nil {
		return "", false
	}
	f, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "frozen")
	if !found || f == nil {
		return "", false
	}
	reason, _, _ = unstructured.NestedString(u.Object, "spec", "frozen", "reason")
	return reason, true
}

// validateFrozen: freezing a Workspace (creating it frozen, or an update
// that sets, changes or removes spec.frozen) needs LimitsVerb on that
// Workspace by the parent's RBAC, checked for the requester without
// clusterauthz's owner rule, as for spec.limits: a tenant who owns the
// workspace cannot unfreeze what its parent froze. A reason must say
// something (the schema bounds its length).
func (p *Plugin) validateFrozen(ctx context.Context, a admission.Attributes) error {
	if a.GetResource().GroupResource() != tenancy.WorkspacesResource.GroupResource() || a.GetSubresource() != "" ||
		(a.GetOperation() != admission.Create && a.GetOperation() != admission.Update) {
		return nil
	}
	parent, ok := logicalcluster.From(ctx)
	if !ok || parent.IsWildcard() {
		return nil
	}
	want, set := frozenOf(a.GetObject())
	var was string
	var wasSet bool
	if a.GetOperation() == admission.Update {
		was, wasSet = frozenOf(a.GetOldObject())
	}
	if want == was && set == wasSet {
		return nil
	}
	if set && strings.TrimSpace(want) == "" {
		return admission.NewForbidden(a, fmt.Errorf("spec.frozen.reason must say why the workspace is frozen (it is shown in every refused write); it is empty"))
	}
	if set && utf8.RuneCountInString(want) > tenancy.MaxFrozenReason {
		return admission.NewForbidden(a, fmt.Errorf("spec.frozen.reason is %d characters long, at most %d are allowed", utf8.RuneCountInString(want), tenancy.MaxFrozenReason))
	}
	wsName := a.GetName()
	if o, err := meta.Accessor(a.GetObject()); err == nil && o.GetName() != "" {
		wsName = o.GetName() // generateName: named by now
	}
	if p.authz == nil {
		return admission.NewForbidden(a, fmt.Errorf("workspace freezes cannot be checked yet (the server is starting); try again"))
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
	what := "freeze"
	if !set {
		what = "unfreeze"
	}
	return admission.NewForbidden(a, fmt.Errorf("%q may not %s workspace %s: spec.frozen is the parent's decision and needs the verb %q on "+
		"workspaces.%s/%s granted by the RBAC of %s (creating or owning the workspace is not enough)", name, what, parent.Join(wsName), LimitsVerb, tenancy.Group, wsName, parent))
}
