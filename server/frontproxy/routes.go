package frontproxy

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// routes knows which shard holds which logical cluster, from one watch of
// LogicalClusters across all clusters on every shard. During a move two
// shards hold a cluster; the copy marked moved (tenancy.MovedToAnnotation,
// set by the old shard when it stops serving it) is used only while the new
// one is not seen yet, so routing never flaps back to the old copy.
type routes struct {
	mu sync.RWMutex
	by map[logicalcluster.Name]string
	// multi holds the clusters held by more than one shard or by a copy
	// marked moved (rare: during moves), instead of by.
	multi map[logicalcluster.Name][]holder
	// changed is closed (and replaced) whenever a cluster is added, for
	// requests waiting for a workspace the proxy has not seen yet.
	changed chan struct{}
	synced  []cache.InformerSynced
}

// holder is one shard's copy of a cluster.
type holder struct {
	shard string
	moved bool
}

func newRoutes() *routes {
	return &routes{by: map[logicalcluster.Name]string{}, multi: map[logicalcluster.Name][]holder{}, changed: make(chan struct{})}
}

// holdersLocked are the copies of c.
func (r *routes) holdersLocked(c logicalcluster.Name) []holder {
	if hs, ok := r.multi[c]; ok {
		return hs
	}
	if s, ok := r.by[c]; ok {
		return []holder{{shard: s}}
	}
	return nil
}

func (r *routes) storeLocked(c logicalcluster.Name, hs []holder) {
	switch {
	case len(hs) == 0:
		delete(r.by, c)
		delete(r.multi, c)
	case len(hs) == 1 && !hs[0].moved:
		r.by[c] = hs[0].shard
		delete(r.multi, c)
	default:
		r.multi[c] = hs
		delete(r.by, c)
	}
}

// choose is the copy requests go to: the newest seen of those not marked
// moved (a second copy appears only by a move, and its old shard's mark
// may arrive later), else a moved one (which answers 503 until the new
// shard's copy is seen).
func choose(hs []holder) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if !hs[i].moved {
			return hs[i].shard, true
		}
	}
	if len(hs) > 0 {
		return hs[0].shard, true
	}
	return "", false
}

func (r *routes) set(c logicalcluster.Name, shard string, moved bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.holdersLocked(c)
	before, _ := choose(hs)
	found := false
	out := make([]holder, 0, len(hs)+1)
	for _, h := range hs {
		if h.shard == shard {
			if h.moved && !moved {
				moved = true // a copy marked moved stays so
			}
			h.moved = moved
			found = true
		}
		out = append(out, h)
	}
	if !found {
		out = append(out, holder{shard: shard, moved: moved})
	}
	r.storeLocked(c, out)
	if after, _ := choose(out); after != before {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

func (r *routes) remove(c logicalcluster.Name, shard string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.holdersLocked(c)
	out := make([]holder, 0, len(hs))
	for _, h := range hs {
		if h.shard != shard {
			out = append(out, h)
		}
	}
	r.storeLocked(c, out)
}

// get returns the shard of c and a channel closed at the next change.
func (r *routes) get(c logicalcluster.Name) (string, bool, <-chan struct{}) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if s, ok := r.by[c]; ok {
		return s, true, r.changed
	}
	s, ok := choose(r.multi[c])
	if ok && s != "" {
		for _, h := range r.multi[c] {
			if h.shard == s && h.moved {
				// Only the copy left behind is seen: the new shard's is
				// coming; wait for it like for an unknown workspace.
				return s, false, r.changed
			}
		}
	}
	return s, ok, r.changed
}

// lcRef is what the cache keeps of a LogicalCluster.
type lcRef struct {
	clusterinformer.Ref
	moved bool
}

// watch starts the watch of one shard's LogicalClusters with cfg (an
// identity that may read them across all clusters).
func (r *routes) watch(ctx context.Context, shard string, cfg *rest.Config) error {
	client, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(cfg))
	if err != nil {
		return err
	}
	res := client.Resource(tenancy.LogicalClustersResource)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { r.seen(obj, shard) },
		UpdateFunc: func(_, obj interface{}) { r.seen(obj, shard) },
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ref, ok := obj.(*lcRef); ok {
				r.remove(ref.Cluster, shard)
			}
		},
	}
	// The cache keeps the cluster of each LogicalCluster and whether it
	// is a copy a move left behind, nothing else.
	trim := func(obj interface{}) (interface{}, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return &lcRef{Ref: clusterinformer.RefOf(u), moved: u.GetAnnotations()[tenancy.MovedToAnnotation] != ""}, nil
		}
		return obj, nil
	}
	_, ctrl := clusterinformer.NewTrimmed(clusterinformer.ListWatch(res.List, res.Watch), &unstructured.Unstructured{}, nil, handler, trim)
	r.synced = append(r.synced, ctrl.HasSynced)
	go ctrl.RunWithContext(ctx)
	return nil
}

func (r *routes) seen(obj interface{}, shard string) {
	if ref, ok := obj.(*lcRef); ok {
		r.set(ref.Cluster, shard, ref.moved)
	}
}

// hasSynced reports whether every shard's first list is in.
func (r *routes) hasSynced() bool {
	for _, s := range r.synced {
		if !s() {
			return false
		}
	}
	return true
}

// lookup returns the shard of c. A cluster not seen yet (a workspace
// created a moment ago) is waited for up to wait; a cluster no shard
// holds goes to the root shard, which answers as for any workspace that
// does not exist.
func (r *routes) lookup(ctx context.Context, c logicalcluster.Name, wait time.Duration) string {
	if c == logicalcluster.Root {
		return shards.RootShard
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		s, ok, changed := r.get(c)
		if ok {
			return s
		}
		fallback := shards.RootShard
		if s != "" {
			fallback = s // the copy a move left behind: it answers 503
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fallback
		case <-ctx.Done():
			return fallback
		}
	}
}
