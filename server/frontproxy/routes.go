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
// LogicalClusters across all clusters on every shard.
type routes struct {
	mu sync.RWMutex
	by map[logicalcluster.Name]string
	// changed is closed (and replaced) whenever a cluster is added, for
	// requests waiting for a workspace the proxy has not seen yet.
	changed chan struct{}
	synced  []cache.InformerSynced
}

func newRoutes() *routes {
	return &routes{by: map[logicalcluster.Name]string{}, changed: make(chan struct{})}
}

func (r *routes) set(c logicalcluster.Name, shard string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by[c] == shard {
		return
	}
	r.by[c] = shard
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *routes) remove(c logicalcluster.Name, shard string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by[c] == shard {
		delete(r.by, c)
	}
}

// get returns the shard of c and a channel closed at the next change.
func (r *routes) get(c logicalcluster.Name) (string, bool, <-chan struct{}) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.by[c]
	return s, ok, r.changed
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
			if ref, ok := obj.(*clusterinformer.Ref); ok {
				r.remove(ref.Cluster, shard)
			}
		},
	}
	// The cache keeps the cluster of each LogicalCluster and nothing else.
	trim := func(obj interface{}) (interface{}, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			ref := clusterinformer.RefOf(u)
			return &ref, nil
		}
		return obj, nil
	}
	_, ctrl := clusterinformer.NewTrimmed(clusterinformer.ListWatch(res.List, res.Watch), &unstructured.Unstructured{}, nil, handler, trim)
	r.synced = append(r.synced, ctrl.HasSynced)
	go ctrl.RunWithContext(ctx)
	return nil
}

func (r *routes) seen(obj interface{}, shard string) {
	if ref, ok := obj.(*clusterinformer.Ref); ok {
		r.set(ref.Cluster, shard)
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
		select {
		case <-changed:
		case <-deadline.C:
			return shards.RootShard
		case <-ctx.Done():
			return shards.RootShard
		}
	}
}
