package shards

import (
	"context"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// accessTTL is how long an answer of another shard about entering a
// workspace is reused (as upstream's webhook authorizer caches: 10 s for
// both answers), and accessCacheMax bounds the cache.
const (
	accessTTL      = 10 * time.Second
	accessCacheMax = 10000
)

// ParentAccess asks the shard that holds a workspace's parent whether a
// user may enter the workspace (the verb "access" on workspaces/content of
// it in the parent): a grant in the parent is the parent's, and this shard
// cannot read the parent's RBAC. The answer is kept accessTTL (Reviewer).
type ParentAccess struct {
	m *Membership
	// ownerShard is the shard of a cluster's Workspace ("" this one).
	ownerShard func(logicalcluster.Name) string
	reviews    *Reviewer
}

type accessAnswer struct {
	allowed bool
	at      time.Time
}

// NewParentAccess returns the check for m (nil when not sharded).
func NewParentAccess(m *Membership, ownerShard func(logicalcluster.Name) string) *ParentAccess {
	if !m.Sharded() {
		return nil
	}
	return &ParentAccess{m: m, ownerShard: ownerShard, reviews: NewReviewer(m)}
}

// Allowed says whether u may enter cluster by a grant in its parent on
// another shard; decided is false when the parent is on this shard.
func (p *ParentAccess) Allowed(ctx context.Context, cluster logicalcluster.Name, u user.Info) (allowed, decided bool) {
	if p == nil || u == nil {
		return false, false
	}
	shard := p.ownerShard(cluster)
	if !p.m.Remote(shard) {
		return false, false
	}
	parent, ok := cluster.Parent()
	if !ok {
		return false, false
	}
	allowed, err := p.reviews.Allowed(ctx, shard, parent, u, authzv1.ResourceAttributes{
		Verb: "access", Group: "tenancy.kcp.io", Version: "*", Resource: "workspaces", Subresource: "content", Name: cluster.Base()})
	if err != nil {
		klog.V(2).InfoS("asking the parent's shard about access failed", "cluster", cluster, "shard", shard, "err", err)
		return false, true
	}
	return allowed, true
}
