// Package clusterauthz owns the authorization rules that depend on the logical
// cluster of a request and run before the upstream authorizers:
//   - /clusters/* (all clusters) is for system:masters only, and only for
//     reads: list and watch of resources, get of discovery and other
//     non-resource paths;
//   - outside root, system:masters are allowed and everyone else is
//     authorized by the RBAC of that cluster alone (Clusters), so that
//     bindings in root never grant access to another cluster.
package clusterauthz

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Authorizer wraps the upstream authorizer chain.
type Authorizer struct {
	// Delegate is the upstream chain, used in root.
	Delegate authorizer.Authorizer
	// Clusters authorizes everyone but system:masters outside root.
	Clusters authorizer.Authorizer
}

func privileged(u user.Info) bool {
	return u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// precheck decides the requests whose answer depends on the cluster alone.
func precheck(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, bool) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	switch {
	case cluster.IsWildcard():
		if !privileged(attr.GetUser()) {
			return authorizer.DecisionDeny, "requests across all logical clusters (/clusters/*) are reserved to system:masters", true
		}
		if attr.IsResourceRequest() && attr.GetVerb() != "list" && attr.GetVerb() != "watch" {
			return authorizer.DecisionDeny, "only list and watch are allowed across all logical clusters (/clusters/*)", true
		}
		if !attr.IsResourceRequest() && attr.GetVerb() != "get" {
			return authorizer.DecisionDeny, "only reads are allowed across all logical clusters (/clusters/*)", true
		}
		return authorizer.DecisionAllow, "", true
	case cluster != logicalcluster.Root && privileged(attr.GetUser()):
		return authorizer.DecisionAllow, "", true
	}
	return authorizer.DecisionNoOpinion, "", false
}

func outsideRoot(ctx context.Context) bool {
	c, ok := logicalcluster.From(ctx)
	return ok && c != logicalcluster.Root
}

func (a Authorizer) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	if d, reason, ok := precheck(ctx, attr); ok {
		return d, reason, nil
	}
	if outsideRoot(ctx) {
		return a.Clusters.Authorize(ctx, attr)
	}
	return a.Delegate.Authorize(ctx, attr)
}

func (a Authorizer) ConditionsAwareAuthorize(ctx context.Context, attr authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if d, reason, ok := precheck(ctx, attr); ok {
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
