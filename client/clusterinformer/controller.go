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
	s := newSink(Consumer{Indexers: indexers, Handler: handler, Keep: keep})
	return s.indexer, newFedController(lw, objType, queued(trim), []*sink{s}, lock, onError)
}

// queued is what the queue of an informer with one cache does to objects:
// trims them as they are queued (so the first list's objects are not kept
// whole until the list is applied), or drops their managed fields.
func queued(trim cache.TransformFunc) cache.TransformFunc {
	if trim == nil {
		return dropManagedFields
	}
	return func(obj interface{}) (interface{}, error) {
		if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return obj, nil
		}
		return trim(obj)
	}
}

// Consumer is one cache fed by a shared list and watch (NewSharedController):
// its cache (Indexer, one the consumer made with KeyFunc; nil: a new one
// with Indexers), its handler (may be nil), what it keeps of each object
// (Trim; nil keeps the object as listed, without managed fields) and which
// objects it keeps at all (Keep, given the trimmed object; nil keeps all),
// with the same meaning as in NewKeepingController.
type Consumer struct {
	Indexer  cache.Indexer
	Indexers cache.Indexers
	Handler  cache.ResourceEventHandler
	Trim     cache.TransformFunc
	Keep     func(obj interface{}) bool
}

// NewSharedController is NewKeepingController for several caches at once:
// one list and one watch feed every consumer, each of which trims, keeps,
// indexes and hears of the objects as its own informer would. Two
// controllers that read the same resource across all clusters pay for one
// list (served, sent and decoded once) instead of two: at 100,000
// workspaces, each list of a custom resource is seconds of a restart. The
// caches are returned in the consumers' order; the first one's keys decide
// which objects a relist finds deleted, so it should keep every object.
// Objects reach the consumers one change at a time, in order, with the
// first consumer's handler called first.
// With one consumer it is NewKeepingController with a cache of one's own.
func NewSharedController(lw cache.ListerWatcher, objType runtime.Object, consumers ...Consumer) ([]cache.Indexer, cache.Controller) {
	if len(consumers) == 1 {
		s := newSink(consumers[0])
		return []cache.Indexer{s.indexer}, newFedController(lw, objType, queued(consumers[0].Trim), []*sink{s}, nil, nil)
	}
	sinks := make([]*sink, len(consumers))
	indexers := make([]cache.Indexer, len(consumers))
	for i, c := range consumers {
		sinks[i] = newSink(c)
		sinks[i].trim = c.Trim
		indexers[i] = sinks[i].indexer
	}
	return indexers, newFedController(lw, objType, dropManagedFields, sinks, nil, nil)
}

// sink is one consumer's cache, handler and filters.
type sink struct {
	indexer cache.Indexer
	handler cache.ResourceEventHandler
	trim    cache.TransformFunc // applied here (NewSharedController) rather than by the queue
	keep    func(obj interface{}) bool
}

func newSink(c Consumer) *sink {
	indexers, handler := c.Indexers, c.Handler
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	if handler == nil {
		handler = cache.ResourceEventHandlerFuncs{}
	}
	indexer := c.Indexer
	if indexer == nil {
		indexer = cache.NewIndexer(KeyFunc, indexers)
	}
	return &sink{indexer: indexer, handler: handler, keep: c.Keep}
}

// apply puts one change into the sink's cache and tells its handler.
func (s *sink) apply(d cache.Delta, isInInitialList bool) error {
	obj := d.Object
	if unknown, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// A deletion a relist found: the queue took the object from the
		// first cache; each cache hears of it as it kept it.
		if own, exists, err := s.indexer.GetByKey(unknown.Key); err == nil && exists {
			obj = cache.DeletedFinalStateUnknown{Key: unknown.Key, Obj: own}
		}
	} else if s.trim != nil {
		var err error
		if obj, err = s.trim(obj); err != nil {
			return err
		}
	}
	if d.Type == cache.Deleted {
		if err := s.indexer.Delete(obj); err != nil {
			return err
		}
		s.handler.OnDelete(obj)
		return nil
	}
	old, exists, err := s.indexer.Get(obj)
	if err != nil {
		return err
	}
	if s.keep != nil && !s.keep(obj) {
		if exists {
			if err := s.indexer.Delete(old); err != nil {
				return err
			}
			s.handler.OnUpdate(old, obj)
		}
		return nil
	}
	if exists {
		if err := s.indexer.Update(obj); err != nil {
			return err
		}
		s.handler.OnUpdate(old, obj)
		return nil
	}
	if err := s.indexer.Add(obj); err != nil {
		return err
	}
	s.handler.OnAdd(obj, isInInitialList)
	return nil
}

// newFedController is the list and watch loop that feeds sinks: transform
// runs as objects are queued, and the first sink's cache is what a relist
// compares with.
func newFedController(lw cache.ListerWatcher, objType runtime.Object, transform cache.TransformFunc, sinks []*sink,
	lock sync.Locker, onError cache.WatchErrorHandlerWithContext) cache.Controller {
	// A RealFIFO (changes in the order they happened) rather than a
	// DeltaFIFO: a DeltaFIFO keeps a map from key to pending changes,
	// which grows to one entry per object during the first list and, as Go
	// maps do not shrink, keeps that size for the informer's life (about
	// 150 bytes per object cached, across all clusters). A RealFIFO's queue
	// is a slice that is released as it drains.
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		KeyFunction:  KeyFunc,
		KnownObjects: sinks[0].indexer,
		Transformer:  transform,
	})
	process := func(obj interface{}, isInInitialList bool) error {
		if lock != nil {
			lock.Lock()
			defer lock.Unlock()
		}
		for _, d := range obj.(cache.Deltas) {
			for _, s := range sinks {
				if err := s.apply(d, isInInitialList); err != nil {
					return err
				}
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
	return cache.New(cfg)
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

// WatchWithContext resumes a watch the server ended (see resumeWatch):
// a reflector that lists again instead would read every object of every
// cluster.
func (l listOnly) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return resumeWatch(ctx, cache.ToListerWatcherWithContext(l.ListerWatcher), o)
}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// Whole is lw as kcp's informers across clusters list and watch: one
// unpaged list, and no initial state streamed as watch events (see
// listOnly). For a reflector of one's own over a store that is not an
// informer's cache.
func Whole(lw cache.ListerWatcher) cache.ListerWatcher { return listOnly{lw} }
