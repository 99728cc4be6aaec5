// Package localwatch lets the server's own informers list and watch its
// built-in resources in process, through the REST storage the API server
// serves them with (and so from the watch cache), instead of over the
// loopback: no HTTP request, and above all no encoding of every object and
// event only for the informer to decode it again. Measured on workspace
// creation, the loopback watches of namespaces, service accounts, config
// maps and ClusterRoleBindings cost a sixth of everything the server
// allocated (docs/performance.md).
//
// The informers see the same objects, events and resourceVersions as over
// the loopback: the storage is the one the API server serves, below its
// handlers, so served defaults, the cluster annotation and deletions are
// all there. What they skip is what the loopback's privileged token made a
// formality anyway: authentication, authorization, priority and fairness,
// audit. Only the server's own code holds a Storages; nothing a request
// sends reaches it.
//
// Objects handed out are the informer's own: a list's items and every
// event's object are deep copies (or built fresh) before conversion, so no
// reader can change what the watch cache holds.
package localwatch

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/sharedmaps"
)

// storage is what a REST storage must serve to be listed and watched here.
type storage interface {
	rest.Lister
	rest.Watcher
}

// Storages records the REST storages of the built-in resources as the API
// server installs them (WrapProviders), for ListWatch.
type Storages struct {
	mu       sync.RWMutex
	storages map[schema.GroupVersionResource]storage
}

// New returns an empty Storages.
func New() *Storages {
	return &Storages{storages: map[schema.GroupVersionResource]storage{}}
}

// WrapProviders returns providers that record the storages they build in
// s; they build and serve exactly what they did.
func (s *Storages) WrapProviders(providers []controlplaneapiserver.RESTStorageProvider) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, len(providers))
	for i, p := range providers {
		r := recording{RESTStorageProvider: p, storages: s}
		if _, ok := p.(genericapiserver.PostStartHookProvider); ok {
			out[i] = recordingWithHook{r}
		} else {
			out[i] = r
		}
	}
	return out
}

type recording struct {
	controlplaneapiserver.RESTStorageProvider
	storages *Storages
}

func (p recording) NewRESTStorage(src serverstorage.APIResourceConfigSource, getter genericregistry.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := p.RESTStorageProvider.NewRESTStorage(src, getter)
	if err != nil {
		return info, err
	}
	p.storages.record(p.GroupName(), info)
	return info, nil
}

// recordingWithHook keeps a provider's post-start hook, which the API
// server finds by type.
type recordingWithHook struct{ recording }

func (p recordingWithHook) PostStartHook() (string, genericapiserver.PostStartHookFunc, error) {
	return p.RESTStorageProvider.(genericapiserver.PostStartHookProvider).PostStartHook()
}

func (s *Storages) record(group string, info genericapiserver.APIGroupInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for version, resources := range info.VersionedResourcesStorageMap {
		for resource, st := range resources {
			if strings.Contains(resource, "/") {
				continue // subresources
			}
			if lw, ok := st.(storage); ok {
				s.storages[schema.GroupVersionResource{Group: group, Version: version, Resource: resource}] = lw
			}
		}
	}
}

// Has reports whether gvr is a built-in resource ListWatch serves.
func (s *Storages) Has(gvr schema.GroupVersionResource) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.storages[gvr]
	return ok
}

// Convert makes the object an informer caches from the internal version
// the storage holds. It is given the storage's object, to read only: what
// it returns must be the informer's own (Versioned converts a deep copy).
type Convert func(obj runtime.Object) (runtime.Object, error)

// Versioned converts to gv's type of the object (corev1.Namespace for a
// core.Namespace), as a typed client would have decoded it.
func Versioned(gv schema.GroupVersion) Convert {
	return func(obj runtime.Object) (runtime.Object, error) {
		if c, ok := obj.(runtime.CacheableObject); ok {
			obj = c.GetObject() // a deep copy
		} else {
			obj = obj.DeepCopyObject()
		}
		// The copy is this function's alone, so the conversion may take it
		// over: UnsafeConvertToVersion shares its maps and slices with the
		// result where ConvertToVersion would copy it a second time (one
		// more whole copy of every object an informer lists or hears of,
		// about 0.4 GB at once of the start-up peak at 100,000 workspaces).
		return legacyscheme.Scheme.UnsafeConvertToVersion(obj, gv)
	}
}

// Trimmed is Versioned for an informer whose readers never read managed
// fields and treat its objects as read-only (RBAC's, the shared
// namespaces'): the object without its managed fields, and with labels
// and annotations shared with equal ones of other objects (package
// sharedmaps). It copies neither: a listed object is copied without them
// and gets the shared maps, or copies of the storage's where there is no
// shared one yet. At a restart an informer lists every object of its
// resource at once, so whatever is copied only to be dropped is held for
// all of them together (about 0.25 GB of namespaces' metadata at 100,000
// workspaces, docs/performance.md).
func Trimmed(gv schema.GroupVersion) Convert {
	return func(obj runtime.Object) (runtime.Object, error) {
		own, err := trimmedCopy(obj)
		if err != nil {
			return nil, err
		}
		return legacyscheme.Scheme.UnsafeConvertToVersion(own, gv)
	}
}

// trimmedCopy is a deep copy of obj, of the storage, without its managed
// fields and with shared labels and annotations; obj is only read.
func trimmedCopy(obj runtime.Object) (runtime.Object, error) {
	if c, ok := obj.(runtime.CacheableObject); ok {
		// A watch event's object: GetObject is a deep copy already, ours
		// to trim.
		own := c.GetObject()
		m, err := meta.Accessor(own)
		if err != nil {
			return nil, err
		}
		m.SetManagedFields(nil)
		m.SetLabels(sharedmaps.Of(m.GetLabels()))
		m.SetAnnotations(sharedmaps.Of(m.GetAnnotations()))
		return own, nil
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("the storage holds a %T, not a pointer to an object", obj)
	}
	// A shallow copy, with what is not to be copied taken out, is what is
	// deep-copied; the storage's object is not touched.
	shallow := reflect.New(v.Elem().Type())
	shallow.Elem().Set(v.Elem())
	sm, err := meta.Accessor(shallow.Interface())
	if err != nil {
		return nil, err
	}
	labels, annotations := sm.GetLabels(), sm.GetAnnotations()
	sm.SetManagedFields(nil)
	sm.SetLabels(nil)
	sm.SetAnnotations(nil)
	own := shallow.Interface().(runtime.Object).DeepCopyObject()
	m, err := meta.Accessor(own)
	if err != nil {
		return nil, err
	}
	m.SetLabels(sharedmaps.Copy(labels))
	m.SetAnnotations(sharedmaps.Copy(annotations))
	return own, nil
}

// ListWatch lists and watches gvr in every logical cluster, with the
// objects convert makes; false when the server has no storage of gvr that
// lists and watches (a custom resource: list and watch it over the
// loopback).
func (s *Storages) ListWatch(gvr schema.GroupVersionResource, convert Convert) (*cache.ListWatch, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.RLock()
	st, ok := s.storages[gvr]
	s.mu.RUnlock()
	if !ok {
		return nil, false
	}
	l := &listWatch{storage: st, convert: convert, gvr: gvr}
	return &cache.ListWatch{ListWithContextFunc: l.list, WatchFuncWithContext: l.watch}, true
}

// Or is ListWatch, or fallback (a list and watch over the loopback) when
// the server has no storage of gvr here.
func (s *Storages) Or(gvr schema.GroupVersionResource, convert Convert, fallback cache.ListerWatcher) cache.ListerWatcher {
	if lw, ok := s.ListWatch(gvr, convert); ok {
		return lw
	}
	return fallback
}

// OrTyped is Or whose fallback is a typed client's List and Watch (aimed at
// /clusters/*), with the objects as gvr's version: what
// clusterinformer.Typed over that client would read.
func OrTyped[L runtime.Object](s *Storages, gvr schema.GroupVersionResource,
	list func(context.Context, metav1.ListOptions) (L, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return s.Or(gvr, Versioned(gvr.GroupVersion()), clusterinformer.ListWatch(list, watchFn))
}

// FromClient is cache.NewListWatchFromClient(c, resource, "", selector)
// for gv's resource in every cluster (c aimed at /clusters/*), listed and
// watched in process as gv's type when the server has the storage here.
func (s *Storages) FromClient(c cache.Getter, gv schema.GroupVersion, resource string, selector fields.Selector) cache.ListerWatcher {
	return s.FromClientAs(c, gv, resource, selector, Versioned(gv))
}

// FromClientAs is FromClient with the objects convert makes when the
// storage is here (a reader that needs less than the whole object); over
// the loopback the objects are gv's, whole.
func (s *Storages) FromClientAs(c cache.Getter, gv schema.GroupVersion, resource string, selector fields.Selector, convert Convert) cache.ListerWatcher {
	lw, ok := s.ListWatch(gv.WithResource(resource), convert)
	if !ok {
		return cache.NewListWatchFromClient(c, resource, metav1.NamespaceAll, selector)
	}
	if selector.Empty() {
		return lw
	}
	return WithFieldSelector(lw, selector)
}

// WithFieldSelector is lw listing and watching only the objects selector
// selects (as cache.NewListWatchFromClient's selector does).
func WithFieldSelector(lw cache.ListerWatcher, selector fields.Selector) cache.ListerWatcher {
	with := cache.ToListerWatcherWithContext(lw)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector.String()
			return with.ListWithContext(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector.String()
			return with.WatchWithContext(ctx, o)
		},
	}
}

type listWatch struct {
	storage storage
	convert Convert
	gvr     schema.GroupVersionResource
}

// everywhere is ctx aimed at every logical cluster and every namespace, as
// a request to /clusters/*/api/v1/<resource> is.
func everywhere(ctx context.Context) context.Context {
	return logicalcluster.WithCluster(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), logicalcluster.Wildcard)
}

func internalOptions(o metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	var out metainternalversion.ListOptions
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&o, &out, nil); err != nil {
		return nil, fmt.Errorf("list options of %s: %w", o.String(), err)
	}
	return &out, nil
}

// listing lets one list at a time read and convert: at a restart every
// informer lists at once, and each list holds, until it is converted, the
// watch cache's list of every object of its resource and the converted
// copies together (a slice of 300,000 config maps or namespaces at
// 100,000 workspaces). One at a time, the start-up peak holds one such
// list, not all of them; they are work for the same cores anyway. A list
// waiting for a filling watch cache does not hold it.
var listing = make(chan struct{}, 1)

func (l *listWatch) list(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	opts, err := internalOptions(o)
	if err != nil {
		return nil, err
	}
	list, err := retryInitializing(ctx, func() (runtime.Object, error) {
		select {
		case listing <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		list, err := l.storage.List(everywhere(ctx), opts)
		if err != nil {
			<-listing
		}
		return list, err
	})
	if err != nil {
		return nil, err
	}
	defer func() { <-listing }()
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	out := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: listMeta.GetResourceVersion(), Continue: listMeta.GetContinue()}}
	out.Items = make([]runtime.RawExtension, 0, len(items))
	for _, item := range items {
		obj, err := l.convert(item)
		if err != nil {
			return nil, fmt.Errorf("converting a listed %s: %w", l.gvr.Resource, err)
		}
		out.Items = append(out.Items, runtime.RawExtension{Object: obj})
	}
	return out, nil
}

func (l *listWatch) watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	opts, err := internalOptions(o)
	if err != nil {
		return nil, err
	}
	opts.Watch = true
	w, err := retryInitializing(ctx, func() (watch.Interface, error) { return l.storage.Watch(everywhere(ctx), opts) })
	if err != nil {
		return nil, err
	}
	// The buffer lets run keep taking events off the watch cache's watcher
	// while the informer's goroutine waits for a core: without it, the
	// cache ended about 120 of these watches for falling behind while 2,000
	// workspaces were created on 2 cores (each then resumed), with it
	// about 15 (docs/performance.md). A full buffer holds pointers to
	// 1,024 objects the informer is about to cache anyway.
	cw := &convertingWatch{inner: w, convert: l.convert, gvr: l.gvr, result: make(chan watch.Event, resultBuffer), done: make(chan struct{})}
	go cw.run()
	return cw, nil
}

// resultBuffer is how many converted events a watch holds for its reader.
const resultBuffer = 1024

// convertingWatch hands on a storage watch's events with their objects
// converted; an error event's status passes as it is.
type convertingWatch struct {
	inner   watch.Interface
	convert Convert
	gvr     schema.GroupVersionResource
	result  chan watch.Event
	done    chan struct{}
	once    sync.Once
}

func (w *convertingWatch) run() {
	defer close(w.result)
	defer w.inner.Stop()
	for e := range w.inner.ResultChan() {
		if e.Type != watch.Error {
			obj, err := w.convert(e.Object)
			if err != nil {
				status := metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError,
					Message: fmt.Sprintf("converting a watched %s: %v", w.gvr.Resource, err), Code: 500}
				e = watch.Event{Type: watch.Error, Object: &status}
			} else {
				e.Object = obj
			}
		}
		select {
		case w.result <- e:
		case <-w.done:
			return
		}
		if e.Type == watch.Error {
			return
		}
	}
}

func (w *convertingWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.inner.Stop() // ends run's range, also when no event comes
	})
}

func (w *convertingWatch) ResultChan() <-chan watch.Event { return w.result }

// While a watch cache fills (at start-up, or after its watch of the
// datastore broke), its storage refuses reads with 429 "storage is
// (re)initializing". Over the loopback, server/clusterinformer's
// waitForCaches asks again every 200 ms for up to a minute; reads in
// process do the same (retryInitializing), rather than leave it to a
// reflector's backoff, which waits seconds after the cache is ready.
const (
	initializingPoll    = 200 * time.Millisecond
	initializingMaxWait = time.Minute
)

// retryInitializing calls read until it returns something other than a
// filling watch cache's refusal, ctx ends or initializingMaxWait has
// passed (the refusal is then returned).
func retryInitializing[T any](ctx context.Context, read func() (T, error)) (T, error) {
	deadline := time.Now().Add(initializingMaxWait)
	for {
		out, err := read()
		if err == nil || !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "storage is (re)initializing") || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			var none T
			return none, ctx.Err()
		case <-time.After(initializingPoll):
		}
	}
}
