package clusterauthz

import (
	"context"
	"strings"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// A service account is itself only in its own logical cluster. Its
// username (system:serviceaccount:<ns>:<name>) and groups
// (system:serviceaccounts, system:serviceaccounts:<ns>) name a service
// account of whichever cluster reads them: RBAC in workspace P that binds
// ServiceAccount default/ci means P's default/ci. Checked in any other
// cluster (a provider's bind, a location's use, a parent's access), a
// service account authenticated by a token of cluster C is therefore seen
// as ForeignServiceAccount(C, ns, name), in system:authenticated only; a
// binding in P can grant it under that name.

// ForeignServiceAccountPrefix starts the name a service account has
// outside its own logical cluster.
const ForeignServiceAccountPrefix = "system:kcp:serviceaccount:"

// ForeignServiceAccount is the username of service account ns/name of
// cluster as seen from any other cluster.
func ForeignServiceAccount(cluster logicalcluster.Name, ns, name string) string {
	return ForeignServiceAccountPrefix + string(cluster) + ":" + ns + ":" + name
}

// SeenIn returns u as RBAC of cluster sees it: itself, or for a service
// account of another cluster its foreign identity.
func SeenIn(cluster logicalcluster.Name, u user.Info) user.Info {
	sa, ok := u.(ServiceAccountIdentity)
	if !ok || sa.ServiceAccountCluster() == cluster {
		return u
	}
	ns, name, err := serviceaccount.SplitUsername(u.GetName())
	if err != nil {
		// Not a service-account name after all: no group or name that
		// means something per cluster is left.
		ns, name = "", strings.TrimPrefix(u.GetName(), serviceaccount.ServiceAccountUsernamePrefix)
	}
	return &user.DefaultInfo{
		Name:   ForeignServiceAccount(sa.ServiceAccountCluster(), ns, name),
		UID:    u.GetUID(),
		Groups: []string{user.AllAuthenticated},
	}
}

// attrsAs are attributes with another user.
type attrsAs struct {
	authorizer.Attributes
	u user.Info
}

func (a attrsAs) GetUser() user.Info { return a.u }

func seenInContext(ctx context.Context, attr authorizer.Attributes) authorizer.Attributes {
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	if u := attr.GetUser(); u != nil {
		if seen := SeenIn(cluster, u); seen != u {
			return attrsAs{Attributes: attr, u: seen}
		}
	}
	return attr
}

// OwnClusterOnly wraps an RBAC authorizer (root's chain, or the
// per-cluster one): a service account from another cluster than the
// context's is judged as its foreign identity.
type OwnClusterOnly struct{ Next authorizer.Authorizer }

func (o OwnClusterOnly) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	return o.Next.Authorize(ctx, seenInContext(ctx, attr))
}

func (o OwnClusterOnly) ConditionsAwareAuthorize(ctx context.Context, attr authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return o.Next.ConditionsAwareAuthorize(ctx, seenInContext(ctx, attr))
}

func (o OwnClusterOnly) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return o.Next.EvaluateConditions(ctx, d, data)
}

// OwnClusterRules is OwnClusterOnly for rule reviews.
type OwnClusterRules struct{ Next authorizer.RuleResolver }

func (o OwnClusterRules) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	return o.Next.RulesFor(ctx, SeenIn(cluster, u), namespace)
}
