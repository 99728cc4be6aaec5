package shards

import (
	"context"
	"fmt"
	"sync"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
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
// cannot read the parent's RBAC. The answer is kept accessTTL.
type ParentAccess struct {
	m *Membership
	// ownerShard is the shard of a cluster's Workspace ("" this one).
	ownerShard func(logicalcluster.Name) string

	mu      sync.Mutex
	clients map[string]kubernetes.Interface
	cache   map[accessKey]accessAnswer
}

type accessKey struct {
	cluster logicalcluster.Name
	user    string
	groups  string
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
	return &ParentAccess{m: m, ownerShard: ownerShard, clients: map[string]kubernetes.Interface{}, cache: map[accessKey]accessAnswer{}}
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
	key := accessKey{cluster: cluster, user: u.GetName(), groups: fmt.Sprint(u.GetGroups())}
	p.mu.Lock()
	if a, ok := p.cache[key]; ok && time.Since(a.at) < accessTTL {
		p.mu.Unlock()
		return a.allowed, true
	}
	c, ok := p.clients[shard]
	p.mu.Unlock()
	if !ok {
		cfg, err := p.m.Peer(shard)
		if err != nil {
			return false, true
		}
		// One client per shard: the parent goes into each request's path.
		if c, err = kubernetes.NewForConfig(cfg); err != nil {
			return false, true
		}
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	review := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: "access", Group: "tenancy.kcp.io", Version: "*", Resource: "workspaces", Subresource: "content", Name: cluster.Base()},
	}}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res := &authzv1.SubjectAccessReview{}
	err := c.AuthorizationV1().RESTClient().Post().AbsPath("/clusters/" + string(parent) + "/apis/authorization.k8s.io/v1/subjectaccessreviews").
		Body(review).Do(rctx).Into(res)
	if err != nil {
		klog.V(2).InfoS("asking the parent's shard about access failed", "cluster", cluster, "shard", shard, "err", err)
		return false, true
	}
	p.mu.Lock()
	if len(p.cache) >= accessCacheMax {
		clear(p.cache)
	}
	p.cache[key] = accessAnswer{allowed: res.Status.Allowed, at: time.Now()}
	if !ok {
		p.clients[shard] = c
	}
	p.mu.Unlock()
	return res.Status.Allowed, true
}
