// Package percluster runs something (upstream admission plugins, an API
// priority and fairness controller) for each logical cluster that has
// configured it, and nothing for the others. Which clusters have, it learns
// from shared watches of the metadata of the configuring resources in all
// clusters; a cluster's instance is built on first use (or when its first
// configuring object appears) and stopped a while after its last one is
// gone.
package percluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// IdleStop is how long an instance keeps running after its cluster's last
// configuring object is gone.
const IdleStop = time.Minute

// Build makes the instance of cluster; it runs until ctx ends.
type Build[T any] func(ctx context.Context, cluster logicalcluster.Name) (T, error)

// Registry holds the instances of the clusters that have configuring
// objects.
type Registry[T any] struct {
	name      string
	resources []schema.GroupVersionResource
	build     Build[T]
	state     atomic.Pointer[state[T]]
	started   chan struct{} // closed once state is set
}

type state[T any] struct {
	ctx      context.Context
	indexers []cache.Indexer
	synced   []cache.InformerSynced
	mu       sync.RWMutex
	running  map[logicalcluster.Name]*instance[T]
}

type instance[T any] struct {
	built             chan struct{} // closed once value and err are set
	value             T
	err               error
	cancel            context.CancelFunc
	unconfiguredSince time.Time // guarded by state.mu
}

// New returns a registry of instances made by build for the clusters that
// have objects of resources; name is used in messages.
func New[T any](name string, resources []schema.GroupVersionResource, build Build[T]) *Registry[T] {
	return &Registry[T]{name: name, resources: resources, build: build, started: make(chan struct{})}
}

// ErrNotReady is returned by Get while the registry's watches have not
// listed yet.
var ErrNotReady = fmt.Errorf("not loaded yet; retry")

// Start runs the watches through loopback until ctx ends. It returns once
// they have their first lists (or after 30 s).
func (r *Registry[T]) Start(ctx context.Context, loopback *rest.Config) error {
	md, err := metadata.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	st := &state[T]{ctx: ctx, running: map[logicalcluster.Name]*instance[T]{}}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			go r.get(st, clusterinformer.ClusterOf(m))
		}
	}}
	for _, gvr := range r.resources {
		res := md.Resource(gvr)
		lw := clusterinformer.ListWatch(func(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
			return res.List(ctx, o)
		}, res.Watch)
		indexer, informer := clusterinformer.New(lw, &metav1.PartialObjectMetadata{}, clusterinformer.ClusterIndexers, handler)
		st.indexers = append(st.indexers, indexer)
		st.synced = append(st.synced, informer.HasSynced)
		go informer.Run(ctx.Done())
	}
	go r.sweep(st)
	r.state.Store(st)
	close(r.started)
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !clusterinformer.WaitForSync(syncCtx, st.synced...) {
		klog.Warningf("%s: the first lists did not finish in 30 s; requests wait for them", r.name)
	}
	return nil
}

// Get returns cluster's instance (ok false if the cluster has no
// configuring object), waiting up to 10 s for Start and the first lists
// (requests and other post-start hooks can come before them). An instance
// that failed to build returns its error until it is stopped.
func (r *Registry[T]) Get(ctx context.Context, cluster logicalcluster.Name) (v T, ok bool, err error) {
	st := r.state.Load()
	if st == nil || !hasSynced(st.synced) {
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		select {
		case <-r.started:
		case <-wait.Done():
			return v, false, ErrNotReady
		}
		st = r.state.Load()
		if !clusterinformer.WaitForSync(wait, st.synced...) {
			return v, false, ErrNotReady
		}
	}
	i := r.get(st, cluster)
	if i == nil {
		return v, false, nil
	}
	return i.value, true, i.err
}

func hasSynced(synced []cache.InformerSynced) bool {
	for _, s := range synced {
		if !s() {
			return false
		}
	}
	return true
}

func (r *Registry[T]) get(st *state[T], cluster logicalcluster.Name) *instance[T] {
	if cluster == "" {
		return nil
	}
	st.mu.RLock()
	i, ok := st.running[cluster]
	st.mu.RUnlock()
	if !ok {
		if !st.configured(cluster) {
			return nil
		}
		st.mu.Lock()
		if i, ok = st.running[cluster]; !ok {
			ctx, cancel := context.WithCancel(st.ctx)
			i = &instance[T]{built: make(chan struct{}), cancel: cancel}
			st.running[cluster] = i
			// Built outside the lock: building may wait for a cluster's
			// informers, and other clusters must not wait for that.
			go func() {
				defer close(i.built)
				if i.value, i.err = r.build(ctx, cluster); i.err != nil {
					// Kept, so that callers fail closed with the reason;
					// retried once the cluster has no configuring object
					// (the sweep), or on restart.
					klog.ErrorS(i.err, r.name, "cluster", cluster)
				}
			}()
		}
		st.mu.Unlock()
	}
	<-i.built
	return i
}

func (st *state[T]) configured(cluster logicalcluster.Name) bool {
	for _, idx := range st.indexers {
		if keys, _ := idx.IndexKeys(clusterinformer.ByCluster, string(cluster)); len(keys) > 0 {
			return true
		}
	}
	return false
}

// sweep stops the instances of clusters that have had no configuring
// object for IdleStop.
func (r *Registry[T]) sweep(st *state[T]) {
	t := time.NewTicker(IdleStop / 4)
	defer t.Stop()
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		st.mu.Lock()
		for c, i := range st.running {
			switch {
			case st.configured(c):
				i.unconfiguredSince = time.Time{}
			case i.unconfiguredSince.IsZero():
				i.unconfiguredSince = now
			case now.Sub(i.unconfiguredSince) >= IdleStop:
				i.cancel()
				delete(st.running, c)
			}
		}
		st.mu.Unlock()
	}
}

// Len is how many instances run.
func (r *Registry[T]) Len() int {
	st := r.state.Load()
	if st == nil {
		return 0
	}
	st.mu.RLock()
	defer st.mu.RUnlock()
	return len(st.running)
}
