package viewidentity

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// A Grant is exactly what a view checked a request for, handed to the
// authorizer with the request: the view's identity is an ordinary user
// (Unprivileged), allowed this and nothing else. If the request reaches
// anything the view did not check (another resource or subresource,
// another verb, another cluster, a check an admission plugin makes on
// the side), the authorizer refuses it.
type Grant struct {
	// User is the view's identity the grant is for.
	User string
	// Cluster is the one logical cluster, or the wildcard.
	Cluster logicalcluster.Name
	// Group and Resource of the resource requests allowed.
	Group, Resource string
	// Subresource allowed: "" only the resource itself; AnySubresource
	// any.
	Subresource string
	// Verbs allowed (nil: any).
	Verbs []string
	// Discovery allows GETs of the discovery paths (/api, /apis, ...)
	// and of OpenAPI v3 instead of resource requests.
	Discovery bool
}

// AnySubresource in Grant.Subresource allows every subresource.
const AnySubresource = "*"

type grantKey struct{}

// WithGrant adds g to ctx (only a view calls it).
func WithGrant(ctx context.Context, g Grant) context.Context {
	return context.WithValue(ctx, grantKey{}, g)
}

// GrantFor returns the grant of ctx if it is for u.
func GrantFor(ctx context.Context, u user.Info) (Grant, bool) {
	g, ok := ctx.Value(grantKey{}).(Grant)
	if !ok || u == nil || u.GetName() != g.User {
		return Grant{}, false
	}
	return g, true
}

// Allows reports whether the grant covers attr in cluster.
func (g Grant) Allows(cluster logicalcluster.Name, attr authorizer.Attributes) bool {
	if cluster != g.Cluster {
		return false
	}
	if !attr.IsResourceRequest() {
		return g.Discovery && attr.GetVerb() == "get" && isDiscovery(attr.GetPath())
	}
	if g.Discovery || attr.GetAPIGroup() != g.Group || attr.GetResource() != g.Resource {
		return false
	}
	if g.Subresource != AnySubresource && attr.GetSubresource() != g.Subresource {
		return false
	}
	return g.Verbs == nil || slices.Contains(g.Verbs, attr.GetVerb())
}

func isDiscovery(path string) bool {
	for _, p := range []string{"/api", "/apis", "/openapi/v3"} {
		if path == p || len(path) > len(p) && path[:len(p)+1] == p+"/" {
			return true
		}
	}
	return false
}

// Unprivileged is a view identity that may do what its grants say and
// nothing else: in no group but system:authenticated.
func Unprivileged(name string) user.Info {
	return &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}
}

type tenantKey struct{}

type tenant struct {
	workspace logicalcluster.Name
	slots     logicalcluster.Name
}

// WithTenant names the workspace a view request is made for (the
// provider's, the location's): fairness counts the request there, in that
// tenant's flow, whatever cluster it reaches (one consumer, or all). slots
// keys the bounds on requests executing and watches starting at once (the
// workspace, or one SyncTarget's syncer of it, so that a location's
// syncers do not wait for each other); it is only a key.
func WithTenant(ctx context.Context, workspace logicalcluster.Name, slots string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant{workspace: workspace, slots: logicalcluster.Name(slots)})
}

// TenantFrom is the workspace a view request is made for, and the key of
// its slots, if it is one.
func TenantFrom(ctx context.Context) (workspace, slots logicalcluster.Name, ok bool) {
	t, ok := ctx.Value(tenantKey{}).(tenant)
	return t.workspace, t.slots, ok
}
