package shards

import (
	"context"
	"fmt"
	"sync"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Reviewer asks another shard whether a user may do something in a
// workspace that shard holds (a SubjectAccessReview in that workspace,
// decided by its RBAC there): what a provider's RBAC decides stays its
// decision when the asking workspace is on another shard. Answers are
// kept accessTTL, like ParentAccess's.
type Reviewer struct {
	m *Membership

	mu      sync.Mutex
	clients map[string]kubernetes.Interface
	cache   map[reviewKey]accessAnswer
}

type reviewKey struct {
	shard   string
	cluster logicalcluster.Name
	user    string
	groups  string
	attrs   authzv1.ResourceAttributes
}

// NewReviewer returns the reviewer of m (nil when not sharded).
func NewReviewer(m *Membership) *Reviewer {
	if !m.Sharded() {
		return nil
	}
	return &Reviewer{m: m, clients: map[string]kubernetes.Interface{}, cache: map[reviewKey]accessAnswer{}}
}

// Allowed asks shard whether u may do attrs in cluster there. An error
// says the shard could not answer (it is not a refusal by RBAC).
func (r *Reviewer) Allowed(ctx context.Context, shard string, cluster logicalcluster.Name, u user.Info, attrs authzv1.ResourceAttributes) (bool, error) {
	if r == nil || u == nil {
		return false, fmt.Errorf("no other shard to ask")
	}
	key := reviewKey{shard: shard, cluster: cluster, user: u.GetName(), groups: fmt.Sprint(u.GetGroups()), attrs: attrs}
	r.mu.Lock()
	if a, ok := r.cache[key]; ok && time.Since(a.at) < accessTTL {
		r.mu.Unlock()
		return a.allowed, nil
	}
	c, ok := r.clients[shard]
	r.mu.Unlock()
	if !ok {
		cfg, err := r.m.Peer(shard)
		if err != nil {
			return false, err
		}
		if c, err = kubernetes.NewForConfig(cfg); err != nil {
			return false, err
		}
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	a := attrs
	review := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra, ResourceAttributes: &a,
	}}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res := &authzv1.SubjectAccessReview{}
	err := c.AuthorizationV1().RESTClient().Post().AbsPath("/clusters/" + string(cluster) + "/apis/authorization.k8s.io/v1/subjectaccessreviews").
		Body(review).Do(rctx).Into(res)
	if err != nil {
		return false, fmt.Errorf("shard %s did not answer: %v", shard, err)
	}
	r.mu.Lock()
	if len(r.cache) >= accessCacheMax {
		clear(r.cache)
	}
	r.cache[key] = accessAnswer{allowed: res.Status.Allowed, at: time.Now()}
	if !ok {
		r.clients[shard] = c
	}
	r.mu.Unlock()
	return res.Status.Allowed, nil
}
