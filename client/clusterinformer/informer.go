package clusterinformer

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Informer keeps a cache of one resource in every logical cluster, filled
// by one list and one watch on /clusters/*, and tells event handlers about
// every change. T is the object type the client returns: a typed object
// such as *corev1.ConfigMap, *unstructured.Unstructured, or
// *metav1.PartialObjectMetadata.
//
// Objects handed out by the cache, listers and handlers are shared: treat
// them as read-only and DeepCopy before changing one.
type Informer[T runtime.Object] struct {
	resource   schema.GroupResource
	indexer    cache.Indexer
	controller cache.Controller

	// mu orders handler registration against the loop applying changes, so
	// a handler added late sees every object exactly once: first as a
	// replayed add, then each change after it.
	mu       sync.Mutex
	handlers []*registration
	// byCluster are handlers of one cluster's objects only (ClusterView):
	// a change costs them nothing in other clusters.
	byCluster map[logicalcluster.Name][]*registration

	startOnce sync.Once
	stopped   chan struct{}

	errMu   sync.Mutex
	lastErr error
}

// Option configures an Informer.
type Option func(*options)

type options struct {
	indexers cache.Indexers
	resource schema.GroupResource
	trim     cache.TransformFunc
}

// WithIndexers adds indexers to the cache, besides ByCluster and
// ByClusterNamespace which every Informer has.
func WithIndexers(indexers cache.Indexers) Option {
	return func(o *options) {
		for k, v := range indexers {
			o.indexers[k] = v
		}
	}
}

// WithResource names the resource in errors (NotFound from listers, a
// refused list). Dynamic sets it from its GroupVersionResource.
func WithResource(gr schema.GroupResource) Option {
	return func(o *options) { o.resource = gr }
}

// WithTrim makes the cache keep trim(object) instead of each object as
// listed or watched (see NewTrimmedController); trim replaces the default,
// which drops managed fields.
func WithTrim(trim cache.TransformFunc) Option {
	return func(o *options) { o.trim = trim }
}

// New returns an Informer over lw, which must list and watch one resource
// across all clusters (a client built on WildcardConfig).
func New[T runtime.Object](lw cache.ListerWatcher, opts ...Option) *Informer[T] {
	o := options{indexers: cache.Indexers{}}
	for k, v := range ClusterIndexers {
		o.indexers[k] = v
	}
	for _, opt := range opts {
		opt(&o)
	}
	inf := &Informer[T]{resource: o.resource, stopped: make(chan struct{})}
	inf.indexer, inf.controller = newTrimmedController(lw, prototype[T](), o.indexers, fanOut[T]{inf}, &inf.mu, inf.watchError, o.trim)
	return inf
}

// ResourceClient is what client-go's typed clients offer for one resource:
// cs.CoreV1().ConfigMaps(""), for example, where L is *corev1.ConfigMapList.
type ResourceClient[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Typed returns an Informer over a typed client of one resource in all
// namespaces, built on WildcardConfig:
//
//	cs, _ := kubernetes.NewForConfig(clusterinformer.WildcardConfig(cfg))
//	cms := clusterinformer.Typed[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(""))
func Typed[T runtime.Object, L runtime.Object](c ResourceClient[L], opts ...Option) *Informer[T] {
	return New[T](ListWatch(c.List, c.Watch), opts...)
}

// Dynamic returns an Informer of unstructured objects of one resource in
// every cluster of the server cfg points at (cfg may be aimed at the server
// or at any one cluster; the informer reads /clusters/*).
func Dynamic(cfg *rest.Config, gvr schema.GroupVersionResource, opts ...Option) (*Informer[*unstructured.Unstructured], error) {
	c, err := dynamic.NewForConfig(WildcardConfig(cfg))
	if err != nil {
		return nil, err
	}
	r := c.Resource(gvr)
	return New[*unstructured.Unstructured](ListWatch(r.List, r.Watch), append([]Option{WithResource(gvr.GroupResource())}, opts...)...), nil
}

// prototype returns a new T for the reflector's type check (nil for
// interface types such as runtime.Object).
func prototype[T runtime.Object]() runtime.Object {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer {
		return nil
	}
	obj, _ := reflect.New(t.Elem()).Interface().(runtime.Object)
	return obj
}

// AddEventHandler registers h. A handler added after the informer started
// first gets an add for every object already in the cache. Handlers run
// one at a time on the informer's goroutine: keep them short (put a key on
// a work queue) or they hold up every other handler and the cache.
func (i *Informer[T]) AddEventHandler(h cache.ResourceEventHandler) {
	i.add(h)
}

// AddEventHandlerUntil is AddEventHandler for a handler that is removed
// when ctx ends: a controller that runs only while its replica holds a
// lease registers with the lease's context on an informer that outlives it.
func (i *Informer[T]) AddEventHandlerUntil(ctx context.Context, h cache.ResourceEventHandler) {
	r := i.add(h)
	context.AfterFunc(ctx, func() {
		i.mu.Lock()
		defer i.mu.Unlock()
		i.handlers = slices.DeleteFunc(i.handlers, func(x *registration) bool { return x == r })
	})
}

// AddClusterEventHandlerUntil registers h for the objects of one cluster
// until ctx ends: h first gets an add for each of the cluster's objects in
// the cache, then their changes. However many clusters have such handlers,
// a change is handed to those of its own cluster alone.
//
// remove removes h at once (ctx ending removes it soon after).
func (i *Informer[T]) AddClusterEventHandlerUntil(ctx context.Context, cluster logicalcluster.Name, h cache.ResourceEventHandler) (remove func()) {
	r := &registration{h}
	i.mu.Lock()
	objs, _ := i.indexer.ByIndex(ByCluster, string(cluster))
	for _, obj := range objs {
		h.OnAdd(obj, true)
	}
	if i.byCluster == nil {
		i.byCluster = map[logicalcluster.Name][]*registration{}
	}
	i.byCluster[cluster] = append(i.byCluster[cluster], r)
	i.mu.Unlock()
	remove = func() {
		i.mu.Lock()
		defer i.mu.Unlock()
		if left := slices.DeleteFunc(i.byCluster[cluster], func(x *registration) bool { return x == r }); len(left) > 0 {
			i.byCluster[cluster] = left
		} else {
			delete(i.byCluster, cluster)
		}
	}
	context.AfterFunc(ctx, remove)
	return remove
}

// registration is one added handler (a pointer, so it can be removed).
type registration struct{ cache.ResourceEventHandler }

func (i *Informer[T]) add(h cache.ResourceEventHandler) *registration {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, obj := range i.indexer.List() {
		h.OnAdd(obj, true)
	}
	r := &registration{h}
	i.handlers = append(i.handlers, r)
	return r
}

// Synced is a cache.Controller for code that waits for informers it also
// runs (a work loop taking []cache.Controller): it waits for this informer
// without running it, so the informer, started by its owner with Start,
// outlives the loop.
func (i *Informer[T]) Synced() cache.Controller { return synced{i.controller} }

// synced is the informer's controller with Run and RunWithContext
// doing nothing.
type synced struct{ cache.Controller }

func (synced) RunWithContext(context.Context) {}
func (synced) Run(<-chan struct{})            {}

// Start runs the informer in the background until ctx is done. Calling it
// again does nothing: several controllers may share one informer.
func (i *Informer[T]) Start(ctx context.Context) {
	i.startOnce.Do(func() {
		go func() {
			defer close(i.stopped)
			i.controller.RunWithContext(ctx)
		}()
	})
}

// Run runs the informer until ctx is done.
func (i *Informer[T]) Run(ctx context.Context) {
	i.Start(ctx)
	<-i.stopped
}

// HasSynced reports whether the cache holds the initial list and every
// handler has been told about it.
func (i *Informer[T]) HasSynced() bool { return i.controller.HasSynced() }

// WaitForCacheSync waits until HasSynced. It returns an error at once when
// the server refuses the credential (401, 403: no rights on /clusters/*),
// rather than retrying in silence as a plain reflector does, and with the
// last list error when ctx ends first. The informer keeps retrying in the
// background either way, so a grant given later still takes effect.
func (i *Informer[T]) WaitForCacheSync(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if i.HasSynced() {
			return nil
		}
		err := i.LastError()
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return err
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%s across all logical clusters not synced: %w (last error: %v)", i.describe(), ctx.Err(), err)
			}
			return fmt.Errorf("%s across all logical clusters not synced: %w", i.describe(), ctx.Err())
		case <-i.stopped:
			return fmt.Errorf("%s across all logical clusters: informer stopped before it synced", i.describe())
		case <-t.C:
		}
	}
}

// LastError is the last failed list or dropped watch, nil before any.
func (i *Informer[T]) LastError() error {
	i.errMu.Lock()
	defer i.errMu.Unlock()
	return i.lastErr
}

func (i *Informer[T]) watchError(ctx context.Context, r *cache.Reflector, err error) {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		err = &RefusedError{Resource: i.describe(), Err: err}
	}
	i.errMu.Lock()
	i.lastErr = err
	i.errMu.Unlock()
	cache.DefaultWatchErrorHandler(ctx, r, err)
}

func (i *Informer[T]) describe() string {
	if i.resource.Resource != "" {
		return i.resource.String()
	}
	if p := prototype[T](); p != nil {
		return reflect.TypeOf(p).Elem().Name()
	}
	return "objects"
}

// RefusedError says that the server refused to list or watch across all
// clusters: the credential lacks the wildcard grant.
type RefusedError struct {
	Resource string
	Err      error
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("listing %s across all logical clusters (/clusters/*) was refused: %v", e.Resource, e.Err)
	if !strings.Contains(e.Err.Error(), "/clusters/*") {
		// kcp names the fix itself; other servers (or a proxy) may not.
		msg += "; the credential needs get, list and watch on the non-resource URL /clusters/* in root"
	}
	return msg + " (see docs/controllers.md)"
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Indexer is the informer's cache, keyed by Key and indexed by ByCluster,
// ByClusterNamespace and any WithIndexers.
func (i *Informer[T]) Indexer() cache.Indexer { return i.indexer }

// Lister reads the cache across clusters or in one cluster.
func (i *Informer[T]) Lister() Lister[T] { return Lister[T]{indexer: i.indexer, resource: i.resource} }

// fanOut hands a change to every registered handler; the loop holds mu.
type fanOut[T runtime.Object] struct{ i *Informer[T] }

func (f fanOut[T]) OnAdd(obj interface{}, initial bool) {
	for _, h := range f.i.handlers {
		h.OnAdd(obj, initial)
	}
	for _, h := range f.clusterHandlers(obj) {
		h.OnAdd(obj, initial)
	}
}

func (f fanOut[T]) OnUpdate(old, obj interface{}) {
	for _, h := range f.i.handlers {
		h.OnUpdate(old, obj)
	}
	for _, h := range f.clusterHandlers(obj) {
		h.OnUpdate(old, obj)
	}
}

func (f fanOut[T]) OnDelete(obj interface{}) {
	for _, h := range f.i.handlers {
		h.OnDelete(obj)
	}
	for _, h := range f.clusterHandlers(obj) {
		h.OnDelete(obj)
	}
}

// clusterHandlers are the handlers of obj's cluster alone.
func (f fanOut[T]) clusterHandlers(obj interface{}) []*registration {
	if len(f.i.byCluster) == 0 {
		return nil
	}
	cluster, _, _, ok := NameOf(obj)
	if !ok {
		return nil
	}
	return f.i.byCluster[cluster]
}

// NameOf returns the cluster, namespace and name of an object handed to
// an event handler, tombstones (cache.DeletedFinalStateUnknown) included.
func NameOf(obj interface{}) (logicalcluster.Name, string, string, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c, ns, n, err := SplitKey(d.Key)
		return c, ns, n, err == nil
	}
	m, ok := obj.(interface {
		metav1Object
		GetNamespace() string
		GetName() string
	})
	if !ok {
		return "", "", "", false
	}
	return ClusterOf(m), m.GetNamespace(), m.GetName(), ClusterOf(m) != ""
}
