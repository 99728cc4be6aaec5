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
// something (the schema bounds its length). Deleting a frozen Workspace
// needs the parent's "delete" alike: a tenant must not escape a freeze (an
// investigation, say) by deleting what it froze.
func (p *Plugin) validateFrozen(ctx context.Context, a admission.Attributes) error {
	if a.GetResource().GroupResource() != tenancy.WorkspacesResource.GroupResource() || a.GetSubresource() != "" {
		return nil
	}
	parent, ok := logicalcluster.From(ctx)
	if !ok || parent.IsWildcard() {
		return nil
	}
	if a.GetOperation() == admission.Delete {
		if was, set := frozenOf(a.GetOldObject()); set {
			return p.parentAllows(ctx, a, parent, a.GetName(), "delete", fmt.Sprintf("delete workspace %s, which is frozen (%s)", parent.Join(a.GetName()), was))
		}
		return nil
	}
	if a.GetOperation() != admission.Create && a.GetOperation() != admission.Update {
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
	what := "freeze"
	if !set {
		what = "unfreeze"
	}
	return p.parentAllows(ctx, a, parent, wsName, LimitsVerb, fmt.Sprintf("%s workspace %s", what, parent.Join(wsName)))
}

// parentAllows checks that the parent's RBAC (without the owner rule)
// allows the requester verb on the Workspace wsName; what says what the
// requester may not do otherwise.
func (p *Plugin) parentAllows(ctx context.Context, a admission.Attributes, parent logicalcluster.Name, wsName, verb, what string) error {
	if p.authz == nil {
		return admission.NewForbidden(a, fmt.Errorf("workspace freezes cannot be checked yet (the server is starting); try again"))
	}
	attr := authorizer.AttributesRecord{
		User: a.GetUserInfo(), Verb: verb, APIGroup: tenancy.Group, APIVersion: tenancy.Version,
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
	return admission.NewForbidden(a, fmt.Errorf("%q may not %s: a freeze is the parent's decision; this needs the verb %q on "+
		"workspaces.%s/%s granted by the RBAC of %s (creating or owning the workspace is not enough)", name, what, verb, tenancy.Group, wsName, parent))
}
