package clusterinformer

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListWatch adapts a typed, dynamic or metadata client's List and Watch of
// one resource (usually through WildcardConfig) to a ListerWatcher.
func ListWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) },
		WatchFuncWithContext: watchFn,
	}
}

// NewController returns the cache and the list/watch loop of an informer
// over lw whose cache uses KeyFunc and the given indexers and which calls
// handler (if any) for every change, on the loop's goroutine. Informer is
// the friendlier wrapper; this is the building block kcp's own controllers
// use.
func NewController(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler) (cache.Indexer, cache.Controller) {
	return newController(lw, objType, indexers, handler, nil, nil)
}

// NewTrimmedController is NewController whose cache keeps what trim
// returns for each object instead of the object: a controller that reads a
// few fields of every object of every cluster keeps only those. trim must
// keep what KeyFunc and the indexers read (the cluster annotation, the
// namespace and the name).
func NewTrimmedController(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler, trim cache.TransformFunc) (cache.Indexer, cache.Controller) {
	return newTrimmedController(lw, objType, indexers, handler, nil, nil, trim)
}

// NewKeepingController is NewTrimmedController whose cache keeps only the
// objects keep (given the trimmed object) is true for. handler hears of
// every deletion, kept or not, of the additions and changes of kept
// objects, and, as a change, of a kept object's change that ends its
// keeping (it then leaves the cache). A deletion missed while the watch
// was down is not heard of for objects the cache did not keep; the relist
// after it gives handler a change of every kept object.
func NewKeepingController(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler, trim cache.TransformFunc, keep func(obj interface{}) bool) (cache.Indexer, cache.Controller) {
	return newKeepingController(lw, objType, indexers, handler, nil, nil, trim, keep)
}

// newController is NewController; lock (if any) is held around each
// change's cache update and handler calls, and onError (if any) hears of
// every failed list or dropped watch.
func newController(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler,
	lock sync.Locker, onError cache.WatchErrorHandlerWithContext) (cache.Indexer, cache.Controller) {
	return newTrimmedController(lw, objType, indexers, handler, lock, onError, nil)
}

func newTrimmedController(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler,
	lock sync.Locker, onError cache.WatchErrorHandlerWithContext, trim cache.TransformFunc) (cache.Indexer, cache.Controller) {
	return newKeepingController(lw, objType, indexers, handler, lock, onError, trim, nil)
}

func newKeepingController(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler,
	lock sync.Locker, onError cache.WatchErrorHandlerWithContext, trim cache.TransformFunc, keep func(obj interface{}) bool) (cache.Indexer, cache.Controller) {
	transform := dropManagedFields
	if trim != nil {
		transform = func(obj interface{}) (interface{}, error) {
			if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				return obj, nil
			}
			return trim(obj)
		}
	}
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	if handler == nil {
		handler = cache.ResourceEventHandlerFuncs{}
	}
	indexer := cache.NewIndexer(KeyFunc, indexers)
	// A RealFIFO (changes in the order they happened) rather than a
	// DeltaFIFO: a DeltaFIFO keeps a map from key to pending changes,
	// which grows to one entry per object during the first list and, as Go
	// maps do not shrink, keeps that size for the informer's life (about
	// 150 bytes per object cached, across all clusters). A RealFIFO's queue
	// is a slice that is released as it drains.
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		KeyFunction:  KeyFunc,
		KnownObjects: indexer,
		Transformer:  transform,
	})
	apply := func(d cache.Delta, isInInitialList bool) error {
		if lock != nil {
			lock.Lock()
			defer lock.Unlock()
		}
		if d.Type == cache.Deleted {
			if err := indexer.Delete(d.Object); err != nil {
				return err
			}
			handler.OnDelete(d.Object)
			return nil
		}
		old, exists, err := indexer.Get(d.Object)
		if err != nil {
			return err
		}
		if keep != nil && !keep(d.Object) {
			if exists {
				if err := indexer.Delete(old); err != nil {
					return err
				}
				handler.OnUpdate(old, d.Object)
			}
			return nil
		}
		if exists {
			if err := indexer.Update(d.Object); err != nil {
				return err
			}
			handler.OnUpdate(old, d.Object)
			return nil
		}
		if err := indexer.Add(d.Object); err != nil {
			return err
		}
		handler.OnAdd(d.Object, isInInitialList)
		return nil
	}
	process := func(obj interface{}, isInInitialList bool) error {
		for _, d := range obj.(cache.Deltas) {
			if err := apply(d, isInInitialList); err != nil {
				return err
			}
		}
		return nil
	}
	cfg := &cache.Config{
		Queue:         fifo,
		ListerWatcher: listOnly{lw},
		ObjectType:    objType,
		Process:       process,
	}
	if onError != nil {
		cfg.WatchErrorHandlerWithContext = onError
	}
	return indexer, cache.New(cfg)
}

// dropManagedFields keeps shared caches small: with objects of every
// cluster in memory, managed fields would be most of their size, and
// controllers reading across clusters rarely need them.
func dropManagedFields(obj interface{}) (interface{}, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// listOnly keeps the reflector from streaming the initial state as watch
// events (WatchList): client-go collects those in a temporary store keyed
// by namespace/name alone, where objects of equal name in different
// clusters overwrite each other. A plain list is keyed by KeyFunc.
type listOnly struct{ cache.ListerWatcher }

// ListWithContext never pages: an informer across clusters reads one
// resource of every cluster, and the watch cache serves each page of a
// paged list by collecting everything from the page's start to the end of
// the resource (upstream's cacher), so paging through a million objects
// 500 at a time costs about a thousand times one whole list. Without the
// cache, kine counts the rest of the range for every page, which is just
// as quadratic. One unpaged list is linear in both.
func (l listOnly) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	o.Limit, o.Continue = 0, ""
	return cache.ToListerWatcherWithContext(l.ListerWatcher).ListWithContext(ctx, o)
}

func (l listOnly) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return cache.ToListerWatcherWithContext(l.ListerWatcher).WatchWithContext(ctx, o)
}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// Whole is lw as kcp's informers across clusters list and watch: one
// unpaged list, and no initial state streamed as watch events (see
// listOnly). For a reflector of one's own over a store that is not an
// informer's cache.
func Whole(lw cache.ListerWatcher) cache.ListerWatcher { return listOnly{lw} }
