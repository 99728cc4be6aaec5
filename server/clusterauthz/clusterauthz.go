// Package clusterauthz owns the authorization rules that depend on the logical
// cluster of a request and run before RBAC:
//   - /clusters/* (all clusters) is for reading only (list and watch of
//     resources, get of discovery), by system:masters and by identities that
//     root's authorizer allows the non-resource URL "/clusters/*";
//   - a logical cluster other than root must exist; only the server itself
//     (system:apiserver) and the other shards of the installation
//     (group system:kcp:shards) may act in one that does not, to bootstrap
//     it;
//   - system:masters may do anything in every existing cluster;
//   - outside root, nobody but system:masters may impersonate the identities
//     that are privileged by name everywhere (groups system:masters and
//     system:kcp:shards, user system:apiserver): a tenant's cluster-admin may impersonate, but only
//     identities that mean something in its own cluster;
//   - everyone else must have created the cluster's workspace or be allowed
//     the verb "access" on workspaces/content of it in its parent (users
//     authenticated by a service-account token of the cluster itself are
//     inside already; the name alone proves nothing), and is then
//     authorized by the RBAC of that cluster alone (Clusters), so bindings in
//     root never grant anything in another cluster;
//   - the verbs "bind" and "content" on an APIExport, when kcp itself asks
//     (WithExportGrant, or another shard's SubjectAccessReview), need only
//     the provider workspace's RBAC;
//   - the creator of a workspace may get, update, patch and delete its
//     Workspace object in the parent, except when kcp itself asks
//     WithoutOwnerRule (the workspace's limits are the parent's decision).
package clusterauthz

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/requester"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// WildcardPath is the non-resource URL that root's RBAC must allow for
// reads across all logical clusters.
const WildcardPath = "/clusters/*"

// Authorizer wraps the upstream authorizer chain.
type Authorizer struct {
	// Delegate is the upstream chain, used in root.
	Delegate authorizer.Authorizer
	// Clusters authorizes everyone but system:masters outside root.
	Clusters authorizer.Authorizer
	// State reports whether a logical cluster exists and is being deleted.
	State func(logicalcluster.Name) (exists, terminating bool)
	// Owner returns the username that created a cluster's workspace.
	Owner func(logicalcluster.Name) string
	// ParentAccess decides the parent's grant of access to a cluster whose
	// parent is on another shard (decided false: the parent is here).
	ParentAccess func(context.Context, logicalcluster.Name, user.Info) (allowed, decided bool)
}

func privileged(u user.Info) bool {
	return u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// precheck decides the requests whose answer depends on the cluster; the
// rest go to Delegate (root) or Clusters (elsewhere).
func (a Authorizer) precheck(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, bool) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	u := attr.GetUser()
	if g, ok := viewidentity.GrantFor(ctx, u); ok {
		// A view's identity may do exactly what the view checked.
		return a.viewGrant(cluster, g, attr)
	}
	if reason, deny := syncerImportDenied(attr); deny {
		return authorizer.DecisionDeny, reason, true
	}
	switch {
	case cluster.IsWildcard():
		if attr.IsResourceRequest() && attr.GetVerb() != "list" && attr.GetVerb() != "watch" {
			return authorizer.DecisionDeny, "only list and watch are allowed across all logical clusters (/clusters/*)", true
		}
		if !attr.IsResourceRequest() && attr.GetVerb() != "get" {
			return authorizer.DecisionDeny, "only reads are allowed across all logical clusters (/clusters/*)", true
		}
		if privileged(u) || a.wildcardReader(ctx, u, attr.GetVerb()) {
			return authorizer.DecisionAllow, "", true
		}
		return authorizer.DecisionDeny, "reads across all logical clusters (/clusters/*) need the non-resource URL " + WildcardPath + " granted in root", true
	case a.ownsWorkspace(ctx, cluster, attr):
		return authorizer.DecisionAllow, "", true
	case cluster == logicalcluster.Root:
		return authorizer.DecisionNoOpinion, "", false
	}
	if selfReview(attr) {
		// "Who am I" tells the user only about themselves, and is
		// answered alike whether the cluster exists or not (upstream lets
		// every authenticated user ask: kubectl auth whoami).
		return authorizer.DecisionAllow, "", true
	}
	exists, terminating := true, false
	if a.State != nil {
		exists, terminating = a.State(cluster)
	}
	// The server itself, and another shard of the installation creating,
	// closing or deleting a workspace whose parent it holds.
	loopback := u != nil && (u.GetName() == user.APIServerUser || slices.Contains(u.GetGroups(), shards.PeersGroup))
	switch {
	case (!exists || terminating) && !loopback && privileged(u):
		return authorizer.DecisionDeny, fmt.Sprintf("logical cluster %s does not exist or is being deleted", cluster), true
	case (!exists || terminating) && !loopback:
		// The same answer as for an existing cluster the user may not
		// enter, so that nobody learns which workspace names exist.
		return authorizer.DecisionDeny, noAccess(cluster, u), true
	case terminating && attr.GetVerb() == "create":
		// Nothing new goes into a cluster whose data is being deleted, not
		// even from the server's own controllers.
		return authorizer.DecisionDeny, fmt.Sprintf("logical cluster %s is being deleted", cluster), true
	case privileged(u):
		return authorizer.DecisionAllow, "", true
	case impersonatesPrivileged(attr):
		return authorizer.DecisionDeny, fmt.Sprintf("impersonating %s %q is reserved to system:masters outside root; "+
			"impersonate an identity of logical cluster %s instead", attr.GetResource(), attr.GetName(), cluster), true
	case !a.mayAccess(ctx, cluster, u) && !exportGrant(ctx, attr):
		return authorizer.DecisionDeny, noAccess(cluster, u), true
	}
	return authorizer.DecisionNoOpinion, "", false
}

// viewGrant decides a request a view continued: allowed if its grant
// covers it and the cluster can take it, refused otherwise.
func (a Authorizer) viewGrant(cluster logicalcluster.Name, g viewidentity.Grant, attr authorizer.Attributes) (authorizer.Decision, string, bool) {
	if !cluster.IsWildcard() && a.State != nil {
		exists, terminating := a.State(cluster)
		if !exists || (terminating && attr.GetVerb() == "create") {
			return authorizer.DecisionDeny, fmt.Sprintf("logical cluster %s does not exist or is being deleted", cluster), true
		}
	}
	if attr.IsResourceRequest() && cluster.IsWildcard() && attr.GetVerb() != "list" && attr.GetVerb() != "watch" {
		return authorizer.DecisionDeny, "only list and watch are allowed across all logical clusters (/clusters/*)", true
	}
	if g.Allows(cluster, attr) {
		return authorizer.DecisionAllow, "", true
	}
	return authorizer.DecisionDeny, fmt.Sprintf("%q may do only what its view checked", g.User), true
}

type exportGrantKey struct{}

// WithExportGrant marks a check of the verb "bind" or "content" on an
// APIExport, made by kcp itself (APIBinding admission, the export's view):
// such a grant in the provider workspace's RBAC is enough, without access
// to the workspace, so that a provider can let other teams bind its API or
// run its controller without letting them in. A context value: no client
// can set it.
func WithExportGrant(ctx context.Context) context.Context {
	return context.WithValue(ctx, exportGrantKey{}, true)
}

func exportGrant(ctx context.Context, attr authorizer.Attributes) bool {
	marked, _ := ctx.Value(exportGrantKey{}).(bool)
	return (marked || peerReview(ctx)) && attr.IsResourceRequest() && attr.GetAPIGroup() == apis.Group && attr.GetResource() == "apiexports" &&
		attr.GetSubresource() == "" && (attr.GetVerb() == apis.VerbBind || attr.GetVerb() == apis.VerbContent)
}

// peerReview: the check is asked by another shard of the installation
// (a SubjectAccessReview it sent, for binding an export of this shard
// from a workspace of its own, server/shards.Reviewer): kcp itself asks,
// as with WithExportGrant. Only a holder of the shards' CA is in
// PeersGroup.
func peerReview(ctx context.Context) bool {
	asker, ok := genericapirequest.UserFrom(ctx)
	return ok && asker != nil && slices.Contains(asker.GetGroups(), shards.PeersGroup)
}

// selfReview: a SelfSubjectReview, which stores nothing and answers with
// the requester's own identity.
func selfReview(attr authorizer.Attributes) bool {
	return attr.IsResourceRequest() && attr.GetAPIGroup() == "authentication.k8s.io" &&
		attr.GetResource() == "selfsubjectreviews" && attr.GetVerb() == "create" && attr.GetSubresource() == ""
}

func noAccess(cluster logicalcluster.Name, u user.Info) string {
	name := ""
	if u != nil {
		name = u.GetName()
	}
	return fmt.Sprintf("logical cluster %s does not exist or %q may not access it", cluster, name)
}

// impersonatesPrivileged: the request asks to impersonate an identity that
// the authorizer trusts by name in every cluster. RBAC of a tenant's cluster
// would allow it (cluster-admin has impersonate on everything). Both the
// classic verb and the constrained ones ("impersonate:user-info", in the
// group authentication.k8s.io) name the user or group the same way.
func impersonatesPrivileged(attr authorizer.Attributes) bool {
	verb := attr.GetVerb()
	if !attr.IsResourceRequest() || (verb != "impersonate" && !strings.HasPrefix(verb, "impersonate:")) {
		return false
	}
	switch attr.GetResource() {
	case "groups":
		return attr.GetName() == user.SystemPrivilegedGroup || attr.GetName() == shards.PeersGroup
	case "users":
		return attr.GetName() == user.APIServerUser
	}
	return false
}

// ServiceAccountIdentity is a user authenticated by a service-account token
// (satokens marks them); its cluster is where the token's account lives.
type ServiceAccountIdentity interface {
	ServiceAccountCluster() logicalcluster.Name
}

// ownerVerbs are what the owner of a workspace may do to its Workspace
// object in the parent without any RBAC object.
var ownerVerbs = map[string]bool{"get": true, "delete": true, "update": true, "patch": true}

type withoutOwnerRuleKey struct{}

// WithoutOwnerRule marks a check, made by kcp itself, that the creator of
// a workspace must pass with the parent's RBAC alone: owning a workspace
// lets its creator edit its Workspace object, not lift what the parent
// decides for it (spec.limits). A context value: no client can set it.
func WithoutOwnerRule(ctx context.Context) context.Context {
	return context.WithValue(ctx, withoutOwnerRuleKey{}, true)
}

// ownsWorkspace: the request addresses, by name, the Workspace object in
// cluster whose child the user created.
func (a Authorizer) ownsWorkspace(ctx context.Context, cluster logicalcluster.Name, attr authorizer.Attributes) bool {
	if off, _ := ctx.Value(withoutOwnerRuleKey{}).(bool); off {
		return false
	}
	if a.Owner == nil || !attr.IsResourceRequest() || attr.GetAPIGroup() != tenancy.Group ||
		attr.GetResource() != "workspaces" || attr.GetName() == "" || !ownerVerbs[attr.GetVerb()] ||
		attr.GetSubresource() != "" || attr.GetUser() == nil {
		return false
	}
	child, err := logicalcluster.Parse(string(cluster.Join(attr.GetName())))
	if err != nil {
		return false
	}
	return a.Owner(child) == attr.GetUser().GetName() && attr.GetUser().GetName() != ""
}

// mayAccess checks that the user created the cluster's workspace or is
// allowed the "access" verb on it in its parent.
func (a Authorizer) mayAccess(ctx context.Context, cluster logicalcluster.Name, u user.Info) bool {
	if u == nil {
		return false
	}
	if a.Owner != nil && u.GetName() != "" && a.Owner(cluster) == u.GetName() {
		return true
	}
	if sa, ok := u.(ServiceAccountIdentity); ok && sa.ServiceAccountCluster() == cluster {
		// A token of the cluster's own service account: it is inside.
		return true
	}
	if standsFor(ctx, u) {
		// The cluster's own service account, named by a request of
		// someone else in it: impersonated (allowed by this cluster's
		// RBAC) or the subject of an access review. It is judged as that
		// service account, by this cluster's RBAC.
		return true
	}
	parent, ok := cluster.Parent()
	if a.ParentAccess != nil && ok {
		// Asked as the parent's RBAC sees the user: a service account of
		// another cluster under its foreign name (the other shard would
		// read a plain name as the parent's own service account).
		if allowed, decided := a.ParentAccess(ctx, cluster, SeenIn(parent, u)); decided {
			return allowed
		}
	}
	if !ok {
		return false
	}
	attr := authorizer.AttributesRecord{
		User: u, Verb: "access", APIGroup: tenancy.Group, APIVersion: "*",
		Resource: "workspaces", Subresource: "content", Name: cluster.Base(), ResourceRequest: true,
	}
	return a.authorizeIn(ctx, parent, attr)
}

// standsFor: u has a service account's name and is not who the request
// authenticated as, but a user the request names (impersonation, the
// subject of a SubjectAccessReview). A user that authenticated with such
// a name (a token file, OIDC) proves nothing and is not one.
func standsFor(ctx context.Context, u user.Info) bool {
	if !strings.HasPrefix(u.GetName(), serviceaccount.ServiceAccountUsernamePrefix) {
		return false
	}
	if _, ok := u.(ServiceAccountIdentity); ok {
		return false
	}
	authenticated, ok := requester.Authenticated(ctx)
	return ok && authenticated.GetName() != u.GetName()
}

func (a Authorizer) wildcardReader(ctx context.Context, u user.Info, verb string) bool {
	if u == nil {
		return false
	}
	attr := authorizer.AttributesRecord{User: u, Verb: verb, Path: WildcardPath, ResourceRequest: false}
	return a.authorizeIn(ctx, logicalcluster.Root, attr)
}

func (a Authorizer) authorizeIn(ctx context.Context, cluster logicalcluster.Name, attr authorizer.Attributes) bool {
	ctx = logicalcluster.WithCluster(ctx, cluster)
	var d authorizer.Decision
	if cluster == logicalcluster.Root {
		d, _, _ = a.Delegate.Authorize(ctx, attr)
	} else if a.Clusters != nil {
		d, _, _ = a.Clusters.Authorize(ctx, attr)
	}
	return d == authorizer.DecisionAllow
}

func outsideRoot(ctx context.Context) bool {
	c, ok := logicalcluster.From(ctx)
	return ok && c != logicalcluster.Root
}

// AuditAnnotation names the logical cluster in audit events; the request's
// path was already rewritten when the audit event was made.
const AuditAnnotation = "kcp.io/cluster"

func annotate(ctx context.Context) {
	if c, ok := logicalcluster.From(ctx); ok {
		audit.AddAuditAnnotation(ctx, AuditAnnotation, string(c))
	}
}

func (a Authorizer) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	annotate(ctx)
	if d, reason, ok := a.precheck(ctx, attr); ok {
		return d, reason, nil
	}
	if outsideRoot(ctx) {
		return a.Clusters.Authorize(ctx, attr)
	}
	return a.Delegate.Authorize(ctx, attr)
}

func (a Authorizer) ConditionsAwareAuthorize(ctx context.Context, attr authorizer.Attributes) authorizer.ConditionsAwareDecision {
	annotate(ctx)
	if d, reason, ok := a.precheck(ctx, attr); ok {
		return authorizer.ConditionsAwareDecisionFromParts(d, reason, nil)
	}
	if outsideRoot(ctx) {
		return a.Clusters.ConditionsAwareAuthorize(ctx, attr)
	}
	return a.Delegate.ConditionsAwareAuthorize(ctx, attr)
}

func (a Authorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.Delegate.EvaluateConditions(ctx, d, data)
}

// RuleResolver answers SelfSubjectRulesReview under the same rules.
type RuleResolver struct {
	Delegate authorizer.RuleResolver
	Clusters authorizer.RuleResolver
}

func (r RuleResolver) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	if outsideRoot(ctx) {
		return r.Clusters.RulesFor(ctx, u, namespace)
	}
	return r.Delegate.RulesFor(ctx, u, namespace)
}
