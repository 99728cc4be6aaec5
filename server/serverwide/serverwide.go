// Package serverwide keeps the non-resource URLs that are about the server
// (metrics, profiling, log level, flow-control dumps, health, status) out of
// the tenants' reach: whatever /clusters/<path> prefix reaches them, only
// root's authorizer (root's RBAC, system:masters) decides. Only the URLs that
// each logical cluster answers for itself (discovery, OpenAPI, its
// service-account issuer documents, version) are left to the cluster's RBAC.
package serverwide

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// perClusterPrefixes are the non-resource URLs a logical cluster serves from
// its own state. Everything else is server-wide: an unknown path is treated
// as the server's, so a new upstream debug endpoint is closed by default.
var perClusterPrefixes = []string{"/api", "/apis", "/openapi", "/.well-known/openid-configuration", "/openid/v1/jwks"}

// perClusterExact are per-cluster URLs matched exactly. /version says which
// Kubernetes a client talks to; every cluster answers it, and clients ask
// for it in the cluster they use.
var perClusterExact = map[string]bool{"/version": true, "/version/": true}

// IsServerWide reports whether a non-resource path (without the
// /clusters/<path> prefix) is about the server rather than one cluster.
func IsServerWide(path string) bool {
	if perClusterExact[path] {
		return false
	}
	for _, p := range perClusterPrefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return false
		}
	}
	return true
}

// Authorizer sends server-wide non-resource requests made outside root to
// Root, as if they had been made in root; everything else goes to Next.
type Authorizer struct {
	// Root is the upstream authorizer chain that root uses (RBAC of root,
	// system:masters).
	Root authorizer.Authorizer
	// Next is the cluster-aware authorizer.
	Next authorizer.Authorizer
	// AuditAnnotation, if set, is the audit annotation naming the request's
	// cluster, added here because Next is skipped.
	AuditAnnotation string
}

// inRoot returns a root context when attr is a server-wide URL reached
// through another cluster's prefix (or the wildcard).
func (a Authorizer) inRoot(ctx context.Context, attr authorizer.Attributes) (context.Context, bool) {
	if attr.IsResourceRequest() || !IsServerWide(attr.GetPath()) {
		return ctx, false
	}
	c, ok := logicalcluster.From(ctx)
	if !ok || c == logicalcluster.Root {
		return ctx, false
	}
	if a.AuditAnnotation != "" {
		audit.AddAuditAnnotation(ctx, a.AuditAnnotation, string(c))
	}
	return logicalcluster.WithCluster(ctx, logicalcluster.Root), true
}

// review reports whether attr is a question about a server-wide URL asked
// in a cluster other than root by an access review (SubjectAccessReview,
// SelfSubjectAccessReview, LocalSubjectAccessReview: the request being
// served is a resource request, the question a non-resource URL), not a
// request for the URL itself. A review answers for its own cluster only:
// root's RBAC is not consulted, so it can neither tell a tenant what root
// allows nor name root's bindings and roles in its reason.
func review(ctx context.Context, attr authorizer.Attributes) bool {
	if attr.IsResourceRequest() || !IsServerWide(attr.GetPath()) {
		return false
	}
	c, ok := logicalcluster.From(ctx)
	if !ok || c == logicalcluster.Root {
		return false
	}
	info, ok := request.RequestInfoFrom(ctx)
	return ok && info.IsResourceRequest
}

// notHere is a review's answer for a server-wide URL outside root.
func notHere(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string) {
	c, _ := logicalcluster.From(ctx)
	return authorizer.DecisionNoOpinion, fmt.Sprintf("%s is about the whole server, not logical cluster %s: "+
		"an access review in %s answers only for %s's own URLs", attr.GetPath(), c, c, c)
}

func (a Authorizer) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	if review(ctx, attr) {
		d, reason := notHere(ctx, attr)
		return d, reason, nil
	}
	if rctx, ok := a.inRoot(ctx, attr); ok {
		d, reason, err := a.Root.Authorize(rctx, attr)
		return d, denied(d, reason), err
	}
	return a.Next.Authorize(ctx, attr)
}

func (a Authorizer) ConditionsAwareAuthorize(ctx context.Context, attr authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if review(ctx, attr) {
		d, reason := notHere(ctx, attr)
		return authorizer.ConditionsAwareDecisionFromParts(d, reason, nil)
	}
	if rctx, ok := a.inRoot(ctx, attr); ok {
		// Root's RBAC has no conditions; asking for an unconditional
		// decision keeps a conditional one from escaping into a tenant.
		d, reason, err := a.Root.Authorize(rctx, attr)
		return authorizer.ConditionsAwareDecisionFromParts(d, denied(d, reason), err)
	}
	return a.Next.ConditionsAwareAuthorize(ctx, attr)
}

func (a Authorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.Next.EvaluateConditions(ctx, d, data)
}

// denied explains a refusal: the tenant's own RBAC may well allow the URL.
func denied(d authorizer.Decision, reason string) string {
	if d == authorizer.DecisionAllow {
		return reason
	}
	const why = "this URL is about the whole server, not one logical cluster; it is authorized by root's RBAC only"
	if reason == "" {
		return why
	}
	return why + ": " + reason
}
