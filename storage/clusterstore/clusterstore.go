// Package clusterstore makes the upstream generic registry cluster-aware
// without forking it: a RESTOptionsGetter that gives every resource the
// "/<group>/<resource>" prefix of our key layout, and a storage.Interface
// decorator that puts the request's logical cluster into every key and the
// kcp.io/cluster annotation onto every object it writes.
package clusterstore

import (
	"context"
	"fmt"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/storage/keys"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/serveddefaults"
)

// RESTOptionsGetter wraps the upstream getter of a server.
type RESTOptionsGetter struct {
	Delegate generic.RESTOptionsGetter
	// PerCluster marks stores built per logical cluster (custom resources):
	// they get no object-count poller, which would be a goroutine per
	// cluster and CRD counting one resource across all clusters anyway.
	PerCluster bool
	// AcrossClusters marks stores built on first use, like PerCluster, that
	// each serve one key range across every cluster (an APIExport's view:
	// the export's objects in all its consumers). They are few (one per
	// export resource and version in use) and are kept in upstream's watch
	// cache when the server enables it (see WrapAcrossClusters).
	AcrossClusters bool
	// OnCreate, when set for a resource, completes each new object of it
	// just before it is stored (after the strategy and admission), for
	// fields that must be there from the first version every client sees.
	OnCreate map[schema.GroupResource]func(runtime.Object)
}

// WithOnCreate returns getter (made cluster-aware) with fn completing new
// objects of gr (see RESTOptionsGetter.OnCreate).
func WithOnCreate(getter generic.RESTOptionsGetter, gr schema.GroupResource, fn func(runtime.Object)) generic.RESTOptionsGetter {
	g := Wrap(getter).(RESTOptionsGetter)
	on := map[schema.GroupResource]func(runtime.Object){gr: fn}
	for k, v := range g.OnCreate {
		if k != gr {
			on[k] = v
		}
	}
	g.OnCreate = on
	return g
}

// WrapPerCluster is Wrap for stores built per logical cluster.
func WrapPerCluster(getter generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	if getter == nil {
		return nil
	}
	if g, ok := getter.(RESTOptionsGetter); ok {
		getter = g.Delegate
	}
	return RESTOptionsGetter{Delegate: getter, PerCluster: true}
}

// WrapAcrossClusters is WrapPerCluster for the stores of an APIExport's
// view, each of which lists and watches one export's key range across all
// its consumers. Without a cache each list read and decoded every object
// from the datastore (about 95 µs an object; a provider's informer over
// 100,000 objects started in 10 s, and paged lists re-read from each
// page's start). Under upstream's watch cache (--watch-cache) a list is
// served from memory at a revision the cache has reached, pages come from
// the cache's snapshots, and a watch from a list's resourceVersion replays
// from the cache's history, as for built-in resources. The cache is one
// reflector (one datastore watch) per export resource and version, never
// one per consumer or binding; it costs one decoded copy of every object of
// the export (docs/performance.md), and is dropped with the view's
// handler when idle (crdserving).
func WrapAcrossClusters(getter generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	if getter == nil {
		return nil
	}
	if g, ok := getter.(RESTOptionsGetter); ok {
		getter = g.Delegate
	}
	return RESTOptionsGetter{Delegate: getter, PerCluster: true, AcrossClusters: true}
}

// Wrap returns getter made cluster-aware; wrapping twice is a no-op.
func Wrap(getter generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	if getter == nil {
		return nil
	}
	if _, ok := getter.(RESTOptionsGetter); ok {
		return getter
	}
	return RESTOptionsGetter{Delegate: getter}
}

func (g RESTOptionsGetter) GetRESTOptions(gr schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.Delegate.GetRESTOptions(gr, example)
	if err != nil {
		return opts, err
	}
	opts.ResourcePrefix = keys.ResourcePrefix(gr)
	if g.PerCluster {
		opts.CountMetricPollPeriod = 0
	}
	// Built-in resources get upstream's store, one client connection each,
	// created once at start, under upstream's watch cache when the server
	// enables it (--watch-cache): one cache per resource over all clusters,
	// whose keys carry the cluster (see cacheKeyFunc), so isolation still
	// comes from the keys alone. Stores built per cluster (custom resources)
	// share one connection instead of dialing one per cluster and CRD, and
	// are not cached: a cache per cluster and CRD would be a goroutine each.
	// An APIExport's view (AcrossClusters) is cached: one store per export
	// resource for all its consumers.
	inner := opts.Decorator
	cached := inner != nil && !isUndecorated(inner)
	perCluster := g.PerCluster && !(g.AcrossClusters && cached)
	onCreate := g.OnCreate[gr]
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		var s storage.Interface
		var destroy factory.DestroyFunc
		var err error
		switch {
		case perCluster:
			s, destroy, err = newSharedStore(config, newFunc, newListFunc, resourcePrefix)
		case cached:
			c := *config
			if c.EventsHistoryWindow < storagebackend.DefaultEventsHistoryWindow {
				c.EventsHistoryWindow = storagebackend.DefaultEventsHistoryWindow
			}
			s, destroy, err = withCacher(&c, resourcePrefix, cacheKeyFunc(resourcePrefix, keyFunc),
				newFunc, newListFunc, sharedAttrs(getAttrs), triggers, indexers)
			if err == nil && g.AcrossClusters {
				s.(*cachedStore).datastoreUntilReady = true
			}
		default:
			s, destroy, err = newRawStorage(config, newFunc, newListFunc, resourcePrefix)
		}
		if err != nil {
			return nil, nil, err
		}
		return &Store{Interface: s, resourcePrefix: resourcePrefix, resource: gr, onCreate: onCreate}, destroy, nil
	}
	return opts, nil
}

// withCacher is upstream's storage decorator with the watch cache
// (genericregistry.StorageWithCacher), except that the cache fills itself
// with plain, unpaged lists (cacheSource). With WatchList, client-go's
// reflector collects the initial objects in a store keyed by namespace and
// name only, where objects of the same name in different clusters (every
// cluster's "default" namespace) overwrote each other and the cache lost all
// but one after each restart.
func withCacher(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
	newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers,
) (storage.Interface, factory.DestroyFunc, error) {
	raw, destroyRaw, err := newRawStorage(config, newFunc, newListFunc, resourcePrefix)
	if err != nil {
		return nil, nil, err
	}
	fed, filled, count := &atomic.Uint64{}, &atomic.Uint64{}, &objectCount{}
	c, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
		Storage: cacheSource{Interface: raw, fed: fed, filled: filled, count: count,
			prefix: path.Join("/", config.Prefix, resourcePrefix) + "/", codec: config.Codec},
		Versioner:           storage.APIObjectVersioner{},
		GroupResource:       config.GroupResource,
		EventsHistoryWindow: config.EventsHistoryWindow,
		ResourcePrefix:      resourcePrefix,
		KeyFunc:             keyFunc,
		NewFunc:             newFunc,
		NewListFunc:         newListFunc,
		GetAttrsFunc:        getAttrs,
		IndexerFuncs:        triggers,
		Indexers:            indexers,
		Codec:               config.Codec,
	})
	if err != nil {
		destroyRaw()
		return nil, nil, err
	}
	delegator := cacherstorage.NewCacheDelegator(c, raw)
	var once sync.Once
	return &cachedStore{Interface: delegator, raw: raw, fed: fed, filled: filled, count: count, ready: c.Ready}, func() {
		once.Do(func() {
			delegator.Stop()
			c.Stop()
			destroyRaw()
		})
	}, nil
}

// cachedStore is upstream's cache delegator, with what Store.GetList needs
// to tell when the cache is behind: the store under it and the newest
// resourceVersion handed to the cache.
type cachedStore struct {
	storage.Interface
	raw storage.Interface
	fed *atomic.Uint64
	// filled is the revision of the list the cache last filled itself
	// from: it has no events before it.
	filled *atomic.Uint64
	count  *objectCount
	ready  func() bool
	// datastoreUntilReady: while the cache fills (an APIExport's view,
	// whose cache is built on its first request), lists wait for it (at
	// most FillWait, then read the datastore) and watches read the
	// datastore. Upstream answers both 429 meanwhile, which a client
	// retries after a second or more.
	datastoreUntilReady bool
}

// FillWait is how long a list waits for a filling cache of an APIExport's
// view before it reads the datastore instead. Waiting is the cheaper: the
// fill reads and decodes every object once, and a list read from the
// datastore meanwhile would do it all again, and its resourceVersion, older
// than the cache's first, would make a watch from it answer 410 Gone once
// the cache serves watches (the client lists again).
const FillWait = 30 * time.Second

// filling reports whether the cache is filling and requests should wait
// for it or read the datastore (datastoreUntilReady).
func (c *cachedStore) filling() bool {
	return c.datastoreUntilReady && !c.ready()
}

// beforeFill reports whether a watch from rv starts before the cache's
// first revision (datastoreUntilReady). The cache would answer 410 Gone,
// and the client would list everything again; the datastore still has
// those events unless kine compacted them. That is the case of a provider
// whose informer listed before the view was rebuilt (idle, or its export
// changed) and watches again.
func (c *cachedStore) beforeFill(rv string) bool {
	if !c.datastoreUntilReady || rv == "" || rv == "0" {
		return false
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	return err == nil && n < c.filled.Load()
}

// waitFilled waits until the cache has filled, at most FillWait, and
// reports whether it has.
func (c *cachedStore) waitFilled(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	deadline := time.NewTimer(FillWait)
	defer deadline.Stop()
	for !c.ready() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-t.C:
		}
	}
	return true
}

// Stats counts the objects in the watch cache instead of in the datastore.
// Upstream polls every resource's count once a minute (the
// apiserver_resource_objects metric and priority and fairness's estimate of
// a list's cost); from the datastore that is a COUNT over every key of the
// resource, in every cluster, on every replica: at 100,000 workspaces a
// quarter of an idle server's CPU. Until the cache has been filled, the
// datastore counts.
func (c *cachedStore) Stats(ctx context.Context) (storage.Stats, error) {
	if n, ok := c.count.get(); ok {
		return storage.Stats{ObjectCount: n}, nil
	}
	return c.Interface.Stats(ctx)
}

// objectCount is the number of objects the watch cache holds, as its
// source handed them: the length of the last list it filled itself from,
// plus the creations and minus the deletions its watch delivered since.
// A nil objectCount counts nothing.
type objectCount struct {
	mu    sync.Mutex
	n     int64
	known bool
}

func (o *objectCount) reset(n int) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.n, o.known = int64(n), true
	o.mu.Unlock()
}

// delivered counts an event the cache received.
func (o *objectCount) delivered(t watch.EventType) {
	var d int64
	switch t {
	case watch.Added:
		d = 1
	case watch.Deleted:
		d = -1
	default:
		return
	}
	if o == nil {
		return
	}
	o.mu.Lock()
	o.n += d
	o.mu.Unlock()
}

func (o *objectCount) get() (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return max(o.n, 0), o.known
}

// LatestRevision, when set (by the server, from its embedded kine), returns
// the newest revision kine has handed its watches: a revision every cache
// will have once its watch has delivered what kine sent it.
var LatestRevision func() uint64

// consistentListFromDatastore says whether a consistent list (no
// resourceVersion) should read the datastore rather than wait for the
// cache. Upstream's cache serves such a list once it has caught up with
// the datastore's newest revision; a cache of a resource that is not being
// written catches up only through a progress notification, which upstream
// requests every 100 ms while lists wait and kine sends only when every
// watch of its stream has been handed every event. When the datastore is
// idle that is at once; while other resources are written without pause it
// failed for hundreds of milliseconds (a tenant's small list waited 90 ms
// at the median and 300 ms at p99 while another tenant wrote secrets). So a
// list whose cache has not been handed kine's newest revision reads the
// datastore, as it would without a cache, when that revision moved in the
// last WritesFlowing; otherwise it waits for the cache (a progress
// notification comes at once). A cache that has been handed kine's newest
// revision may still wait for revisions kine has not yet handed out
// (another replica's writes), as upstream's does.
func (c *cachedStore) consistentListFromDatastore(opts storage.ListOptions) bool {
	if opts.ResourceVersion != "" || LatestRevision == nil {
		return false
	}
	latest := LatestRevision()
	flowing := handed.writesFlowing(latest, time.Now())
	return c.fed.Load() < latest && flowing
}

// WritesFlowing is how recently kine's newest revision must have moved for
// the datastore to count as being written without pause.
const WritesFlowing = 100 * time.Millisecond

// handed follows kine's newest handed revision, for writesFlowing.
var handed revisionClock

type revisionClock struct {
	mu    sync.Mutex
	rev   uint64
	moved time.Time
}

// writesFlowing notes rev, the newest revision now, and says whether it
// moved within WritesFlowing of now.
func (r *revisionClock) writesFlowing(rev uint64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev != r.rev {
		r.rev, r.moved = rev, now
	}
	return now.Sub(r.moved) < WritesFlowing
}

// consistentListsFromDatastore counts the lists consistentListFromDatastore
// sent to the datastore, on /metrics.
var consistentListsFromDatastore = metrics.NewCounterVec(&metrics.CounterOpts{
	Name:           "kcp_consistent_lists_from_datastore_total",
	Help:           "Lists without a resourceVersion read from the datastore because the watch cache of their resource had not yet been handed the newest revision.",
	StabilityLevel: metrics.ALPHA,
}, []string{"resource"})

func init() { legacyregistry.MustRegister(consistentListsFromDatastore) }

// cacheSource is the store the cache fills itself from: with plain lists,
// not WatchList (see withCacher), and unpaged. The cache's reflector asks
// for pages of 10,000; kine answers each page that has more with a count of
// the rest of the range, so filling the cache of a resource with a million
// objects took minutes instead of seconds. Clients' lists do not come
// through here: the delegator reads the raw store, pages and all. The list
// is still read in pieces: etcd3's store streams it (RangeStream, which the
// embedded kine implements), so no gRPC message holds the whole resource.
// The objects it gives the cache share their small maps (sharing.go).
//
// It also notes the newest resourceVersion it has handed the cache (fed):
// see Store.GetList; and counts the objects it has handed (count): see
// cachedStore.Stats.
//
// A resource whose range holds served defaults (storage/serveddefaults),
// and the namespaces they derive from, are read in this process instead
// (ListObjects): the defaults come as objects, not encoded by kine, sent
// through its gRPC stream and decoded again; the namespaces come from the
// read the defaults' lists make anyway; and the items are made once at
// their final size rather than grown object by object.
type cacheSource struct {
	storage.Interface
	fed    *atomic.Uint64
	filled *atomic.Uint64 // the revision of the last list (nil: not noted)
	count  *objectCount
	prefix string // the resource's etcd key prefix, ending in "/"
	codec  runtime.Codec
}

// ListObjects, when set (by the server, from its embedded kine), lists
// every live key below an etcd prefix at the datastore's current revision,
// served defaults as objects of their v1 type; ok is false for a range it
// does not read so (one without served defaults that is not every
// namespace). ConvertObject turns such an object into the type the store
// holds (defaulted, as decoding would). Both or neither are set.
var (
	ListObjects   func(ctx context.Context, prefix string) (rev int64, items []serveddefaults.Item, ok bool, err error)
	ConvertObject func(in, out runtime.Object) error
)

func (cacheSource) IsWatchListSemanticsUnSupported() bool { return true }

func (s cacheSource) GetList(ctx context.Context, key string, opts storage.ListOptions, out runtime.Object) error {
	opts.Predicate.Limit, opts.Predicate.Continue = 0, ""
	if read, err := s.listObjects(ctx, opts, out); err != nil {
		return err
	} else if !read {
		if err := s.Interface.GetList(ctx, key, opts, out); err != nil {
			return err
		}
	}
	sharedList(out)
	if m, err := meta.ListAccessor(out); err == nil {
		s.note(m.GetResourceVersion())
		if n, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64); err == nil && s.filled != nil {
			s.filled.Store(n)
		}
	}
	if opts.Recursive {
		s.count.reset(meta.LenList(out))
	}
	return nil
}

// listObjects fills out from ListObjects, as etcd3's store would from the
// same rows and defaults: each stored value decoded with the resource's
// codec, each default converted, every object given its revision as its
// resourceVersion and the list the revision read at. read is false when
// the list is not one it takes (not the cache's unfiltered list of the
// newest objects, or a range ListObjects does not read).
func (s cacheSource) listObjects(ctx context.Context, opts storage.ListOptions, out runtime.Object) (read bool, err error) {
	if ListObjects == nil || ConvertObject == nil || s.codec == nil || !opts.Recursive || !opts.Predicate.Empty() ||
		(opts.ResourceVersion != "" && opts.ResourceVersion != "0") {
		return false, nil
	}
	ptr, err := meta.GetItemsPtr(out)
	if err != nil {
		return false, nil
	}
	v := reflect.ValueOf(ptr).Elem()
	if v.Kind() != reflect.Slice || v.Type().Elem().Kind() != reflect.Struct {
		return false, nil
	}
	rev, items, ok, err := ListObjects(ctx, s.prefix)
	if !ok {
		return false, nil
	}
	if err != nil {
		return true, storage.NewInternalError(fmt.Errorf("listing %s: %w", s.prefix, err))
	}
	objs := reflect.MakeSlice(v.Type(), len(items), len(items))
	versioner := storage.APIObjectVersioner{}
	for i, it := range items {
		at := objs.Index(i)
		obj := at.Addr().Interface().(runtime.Object)
		if def := it.Default(); def != nil {
			err = ConvertObject(def, obj)
		} else {
			var got runtime.Object
			if got, _, err = s.codec.Decode(it.Value, nil, obj); err == nil && got != obj {
				gv := reflect.ValueOf(got)
				if gv.Kind() != reflect.Pointer || gv.Elem().Type() != at.Type() {
					err = fmt.Errorf("decoded %T, not %s", got, at.Type())
				} else {
					at.Set(gv.Elem())
				}
			}
		}
		if err != nil {
			return true, storage.NewInternalError(fmt.Errorf("decoding %s: %w", it.Key, err))
		}
		if err := versioner.UpdateObject(obj, uint64(it.Revision)); err != nil {
			return true, err
		}
		items[i] = serveddefaults.Item{} // what is decoded need not wait for the rest
	}
	v.Set(objs)
	return true, versioner.UpdateList(out, uint64(rev), "", nil)
}

func (s cacheSource) note(rv string) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	for {
		old := s.fed.Load()
		if n <= old || s.fed.CompareAndSwap(old, n) {
			return
		}
	}
}

// isUndecorated tells whether upstream chose no watch cache for a resource
// (--watch-cache=false, or a size of 0 in --watch-cache-sizes). Any other
// decorator is upstream's cacher, which would key objects without their
// cluster: it is replaced by the same cacher with cluster keys.
func isUndecorated(d generic.StorageDecorator) bool {
	return reflect.ValueOf(d).Pointer() == reflect.ValueOf(generic.UndecoratedStorage).Pointer()
}

// cacheKeyFunc gives the watch cache the full key of an object, cluster
// included, as the Store below computes it for requests: the cache holds the
// objects of all clusters in one ordered tree, and a cluster's list or watch
// is the key range of that cluster. The cluster comes from the kcp.io/cluster
// annotation, which Store sets on every write (overwriting whatever a client
// sent), so it always names the cluster of the object's key.
func cacheKeyFunc(resourcePrefix string, keyFunc func(runtime.Object) (string, error)) func(runtime.Object) (string, error) {
	return func(obj runtime.Object) (string, error) {
		k, err := keyFunc(obj)
		if err != nil {
			return "", err
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return "", err
		}
		c := logicalcluster.Name(m.GetAnnotations()[logicalcluster.Annotation])
		full, err := keys.WithCluster(resourcePrefix, k, c)
		if err != nil {
			// Only a row written around the API (by hand, in SQL) can lack
			// the annotation. An error here would fail the cache of the
			// whole resource; instead the object goes where no cluster's
			// key range reaches (wildcard lists still show it), and reads
			// without a resource version still find it in the datastore.
			klog.ErrorS(err, "object without a valid logical cluster annotation: not served from the watch cache to any cluster", "key", k, "annotation", logicalcluster.Annotation)
			return resourcePrefix + "/" + unaddressable + strings.TrimPrefix(k, resourcePrefix), nil
		}
		return full, nil
	}
}

// unaddressable is a cluster segment no request can name (logical cluster
// names are lower-case letters, digits, '-' and ':').
const unaddressable = "~unannotated"

// Store is a storage.Interface confined to the logical cluster of each call's
// context. Requests that reach storage without a cluster in their context are
// the server's own (post-start hooks, internal controllers acting on root):
// the routing filter gives every external request a cluster, so those calls
// act on root.
type Store struct {
	storage.Interface
	resourcePrefix string
	resource       schema.GroupResource
	onCreate       func(runtime.Object)
}

func clusterOf(ctx context.Context) logicalcluster.Name {
	if n, ok := logicalcluster.From(ctx); ok {
		return n
	}
	return logicalcluster.Root
}

// key maps a registry key into the cluster of ctx. Wildcard requests may only
// address the whole resource (all clusters, all namespaces).
func (s *Store) key(ctx context.Context, key string, wildcardOK bool) (string, logicalcluster.Name, error) {
	cluster := clusterOf(ctx)
	if cluster.IsWildcard() {
		if wildcardOK && key == s.resourcePrefix {
			return key, cluster, nil
		}
		return "", cluster, errors.NewBadRequest(fmt.Sprintf(
			"requests across all logical clusters (/clusters/*) can only list or watch %s in all namespaces", s.resource))
	}
	k, err := keys.WithCluster(s.resourcePrefix, key, cluster)
	if err != nil {
		return "", cluster, errors.NewInternalError(err)
	}
	return k, cluster, nil
}

func annotate(obj runtime.Object, cluster logicalcluster.Name) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	a := m.GetAnnotations()
	if a[logicalcluster.Annotation] == string(cluster) {
		return nil
	}
	if a == nil {
		a = map[string]string{}
	}
	a[logicalcluster.Annotation] = string(cluster)
	m.SetAnnotations(a)
	return nil
}

// unchangedCluster refuses an update that sets the kcp.io/cluster annotation
// to another logical cluster: the annotation is the server's, and an update
// that looked accepted but was overwritten would mislead (kubectl annotate
// printed "annotated"). An update that drops it gets it back from annotate.
func unchangedCluster(obj runtime.Object, cluster logicalcluster.Name) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if v, ok := m.GetAnnotations()[logicalcluster.Annotation]; ok && v != string(cluster) {
		return errors.NewBadRequest(fmt.Sprintf("metadata.annotations[%s] is set by the server to the object's logical cluster (%s) and cannot be changed to %q; objects move between workspaces with kcp export and kcp import",
			logicalcluster.Annotation, cluster, v))
	}
	return nil
}

func (s *Store) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	k, cluster, err := s.key(ctx, key, false)
	if err != nil {
		return err
	}
	if err := annotate(obj, cluster); err != nil {
		return err
	}
	if s.onCreate != nil {
		s.onCreate(obj)
	}
	return datastoreError(s.Interface.Create(ctx, k, obj, out, ttl))
}

func (s *Store) Delete(ctx context.Context, key string, out runtime.Object, pre *storage.Preconditions,
	validate storage.ValidateObjectFunc, cached runtime.Object, opts storage.DeleteOptions) error {
	k, _, err := s.key(ctx, key, false)
	if err != nil {
		return err
	}
	return datastoreError(s.Interface.Delete(ctx, k, out, pre, validate, cached, opts))
}

func (s *Store) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	k, _, err := s.key(ctx, key, opts.Recursive)
	if err != nil {
		return nil, err
	}
	if err := checkResourceVersion(opts.ResourceVersion); err != nil {
		return nil, err
	}
	from := s.Interface
	if c, ok := s.Interface.(*cachedStore); ok && (c.filling() || c.beforeFill(opts.ResourceVersion)) {
		// A watch from the datastore, from the same resourceVersion,
		// delivers the same events.
		from = c.raw
	}
	w, err := from.Watch(ctx, k, opts)
	return w, datastoreError(err)
}

func (s *Store) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	k, _, err := s.key(ctx, key, false)
	if err != nil {
		return err
	}
	if err := checkResourceVersion(opts.ResourceVersion); err != nil {
		return err
	}
	return datastoreError(s.Interface.Get(ctx, k, opts, out))
}

func (s *Store) GetList(ctx context.Context, key string, opts storage.ListOptions, out runtime.Object) error {
	k, cluster, err := s.key(ctx, key, opts.Recursive)
	if err != nil {
		return err
	}
	if err := checkResourceVersion(opts.ResourceVersion); err != nil {
		return err
	}
	from := s.Interface
	if c, ok := s.Interface.(*cachedStore); ok {
		switch {
		// Not for a list of an APIExport's view across its consumers: it
		// holds every consumer's objects, and reading them all from the
		// datastore (seconds at 100,000) costs far more than waiting for
		// a progress notification (at most a few hundred milliseconds
		// while other resources are written). A consumer's own list in
		// the same store (one handler per export) is small and keeps the
		// rule.
		case (!c.datastoreUntilReady || !cluster.IsWildcard()) && c.consistentListFromDatastore(opts):
			from = c.raw
			consistentListsFromDatastore.WithLabelValues(s.resource.String()).Inc()
		// While the cache fills, a consumer's own list reads the datastore
		// at once (a few objects); a list across consumers waits for it.
		case c.filling() && (!cluster.IsWildcard() || !c.waitFilled(ctx)):
			from = c.raw
		}
	}
	if err := from.GetList(ctx, k, opts, out); err != nil {
		return datastoreError(err)
	}
	if opts.Recursive && opts.Predicate.Limit == 0 && opts.Predicate.Empty() {
		ListSizes.Observe(cluster, s.resource, namespaceOf(s.resourcePrefix, key), meta.LenList(out))
	}
	return nil
}

// namespaceOf returns the namespace a list key is limited to, or "".
func namespaceOf(resourcePrefix, key string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(key, resourcePrefix), "/")
	ns, _, _ := strings.Cut(rest, "/")
	return ns
}

func (s *Store) GuaranteedUpdate(ctx context.Context, key string, dest runtime.Object, ignoreNotFound bool,
	pre *storage.Preconditions, tryUpdate storage.UpdateFunc, cached runtime.Object) error {
	k, cluster, err := s.key(ctx, key, false)
	if err != nil {
		return err
	}
	annotated := func(in runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		out, ttl, err := tryUpdate(in, res)
		if err != nil {
			return out, ttl, err
		}
		if err := unchangedCluster(out, cluster); err != nil {
			return nil, nil, err
		}
		if err := annotate(out, cluster); err != nil {
			return nil, nil, err
		}
		if s.onCreate != nil && ignoreNotFound && res.ResourceVersion == 0 {
			// An update that creates (server-side apply of a missing
			// object, a PUT that may create): completed as a create is.
			s.onCreate(out)
		}
		return out, ttl, nil
	}
	return datastoreError(s.Interface.GuaranteedUpdate(ctx, k, dest, ignoreNotFound, pre, annotated, cached))
}

// identityGetter stores resources served through an APIBinding under their
// export's identity (keys.BoundResourcePrefix).
type identityGetter struct {
	generic.RESTOptionsGetter
	identity func(schema.GroupResource) string
}

// WithIdentity returns getter with the key range of every resource for
// which identity is not empty moved to that export identity's.
func WithIdentity(getter generic.RESTOptionsGetter, identity func(schema.GroupResource) string) generic.RESTOptionsGetter {
	return identityGetter{RESTOptionsGetter: getter, identity: identity}
}

func (g identityGetter) GetRESTOptions(gr schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(gr, example)
	if err == nil {
		if id := g.identity(gr); id != "" {
			opts.ResourcePrefix = keys.BoundResourcePrefix(gr, id)
		}
	}
	return opts, err
}
