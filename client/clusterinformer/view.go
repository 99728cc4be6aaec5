package clusterinformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// errReadOnly answers writes to a ClusterView's store: the view reads the
// informer's cache, which only the informer fills.
var errReadOnly = errors.New("a cluster view of a shared informer is read-only")

// ClusterView returns one logical cluster's part of the informer as a
// client-go cache.SharedIndexInformer, for code written against client-go's
// informer factories (upstream's admission plugins) that would otherwise
// need an informer, a watch and its goroutines of its own in every
// cluster. Its store holds only the cluster's objects, under client-go's
// keys ("<namespace>/<name>", or "<name>"), with client-go's namespace
// index; its handlers hear only of the cluster's objects and are removed
// when ctx ends, or by RemoveEventHandler. It runs nothing: Run waits for
// ctx, and the informer must be started by its owner.
func (i *Informer[T]) ClusterView(ctx context.Context, cluster logicalcluster.Name) cache.SharedIndexInformer {
	return &view{add: i.AddClusterEventHandlerUntil, controller: i.controller, cluster: cluster, ctx: ctx,
		store: viewStore{indexer: i.indexer, cluster: cluster}}
}

type view struct {
	add        func(ctx context.Context, cluster logicalcluster.Name, h cache.ResourceEventHandler) (remove func())
	controller cache.Controller
	cluster    logicalcluster.Name
	ctx        context.Context
	store      viewStore
}

// viewRegistration is a handler added to a view; removing it removes the
// handler at once and cancels its context.
type viewRegistration struct {
	cancel     context.CancelFunc
	controller cache.Controller
}

func (r *viewRegistration) HasSynced() bool { return r.controller.HasSynced() }

func (r *viewRegistration) HasSyncedChecker() cache.DoneChecker {
	return r.controller.HasSyncedChecker()
}

func (v *view) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	ctx, cancel := context.WithCancel(v.ctx)
	// The informer replays the cluster's objects while it adds h: once
	// it has synced, so has h.
	remove := v.add(ctx, v.cluster, h)
	return &viewRegistration{cancel: func() { remove(); cancel() }, controller: v.controller}, nil
}

func (v *view) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, _ time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return v.AddEventHandler(h)
}

func (v *view) AddEventHandlerWithOptions(h cache.ResourceEventHandler, _ cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return v.AddEventHandler(h)
}

func (v *view) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*viewRegistration)
	if !ok {
		return fmt.Errorf("not a registration of this view: %T", handle)
	}
	r.cancel()
	return nil
}

func (v *view) GetStore() cache.Store                  { return v.store }
func (v *view) GetIndexer() cache.Indexer              { return v.store }
func (v *view) GetController() cache.Controller        { return synced{v.controller} }
func (v *view) Run(stopCh <-chan struct{})             { <-stopCh }
func (v *view) RunWithContext(ctx context.Context)     { <-ctx.Done() }
func (v *view) HasSynced() bool                        { return v.controller.HasSynced() }
func (v *view) HasSyncedChecker() cache.DoneChecker    { return v.controller.HasSyncedChecker() }
func (v *view) LastSyncResourceVersion() string        { return "" }
func (v *view) IsStopped() bool                        { return v.ctx.Err() != nil }
func (v *view) AddIndexers(cache.Indexers) error       { return errReadOnly }
func (v *view) SetTransform(cache.TransformFunc) error { return errReadOnly }

// SetWatchErrorHandler is accepted and ignored: the shared informer
// reports its own watch errors.
func (v *view) SetWatchErrorHandler(cache.WatchErrorHandler) error { return nil }

func (v *view) SetWatchErrorHandlerWithContext(cache.WatchErrorHandlerWithContext) error {
	return nil
}

// viewStore reads one cluster's objects from a shared informer's cache
// under client-go's keys.
type viewStore struct {
	indexer cache.Indexer
	cluster logicalcluster.Name
}

func (s viewStore) List() []interface{} {
	objs, _ := s.indexer.ByIndex(ByCluster, string(s.cluster))
	return objs
}

func (s viewStore) ListKeys() []string {
	var keys []string
	for _, obj := range s.List() {
		if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			keys = append(keys, k)
		}
	}
	return keys
}

func (s viewStore) Get(obj interface{}) (interface{}, bool, error) {
	k, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	return s.GetByKey(k)
}

func (s viewStore) GetByKey(key string) (interface{}, bool, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, false, err
	}
	return s.indexer.GetByKey(Key(s.cluster, ns, name))
}

func (s viewStore) ByIndex(indexName, value string) ([]interface{}, error) {
	if indexName != cache.NamespaceIndex {
		return nil, fmt.Errorf("a cluster view has no index %q", indexName)
	}
	return ByNamespace(s.indexer, s.cluster, value)
}

func (s viewStore) Index(indexName string, obj interface{}) ([]interface{}, error) {
	values, err := cache.MetaNamespaceIndexFunc(obj)
	if err != nil || indexName != cache.NamespaceIndex || len(values) == 0 {
		return nil, fmt.Errorf("a cluster view indexes by %q only: %v", cache.NamespaceIndex, err)
	}
	return s.ByIndex(indexName, values[0])
}

func (s viewStore) IndexKeys(indexName, value string) ([]string, error) {
	objs, err := s.ByIndex(indexName, value)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(objs))
	for _, obj := range objs {
		if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (s viewStore) ListIndexFuncValues(string) []string { return nil }

func (s viewStore) GetIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
}

func (s viewStore) AddIndexers(cache.Indexers) error     { return errReadOnly }
func (s viewStore) Add(interface{}) error                { return errReadOnly }
func (s viewStore) Update(interface{}) error             { return errReadOnly }
func (s viewStore) Delete(interface{}) error             { return errReadOnly }
func (s viewStore) Replace([]interface{}, string) error  { return errReadOnly }
func (s viewStore) Resync() error                        { return nil }
func (s viewStore) Bookmark(string)                      {}
func (s viewStore) LastStoreSyncResourceVersion() string { return "" }
