// Package garbagecollector collects dependents by ownerReference in every
// logical cluster with one shared controller (see README.md).
package garbagecollector

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/storage/keys"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const (
	name    = "kcp-garbage-collector"
	byOwner = "owner"
)

// skipped resources churn a lot and are never owners worth watching.
var skipped = sets.New(
	schema.GroupResource{Resource: "events"},
	schema.GroupResource{Group: "events.k8s.io", Resource: "events"},
)

// watchedResources is what an operator checks to see that the collector
// lets go of custom resources whose last CRD is gone (issue 50 item 7):
// each is a reflector listing and watching across all clusters.
var watchedResources = metrics.NewGauge(&metrics.GaugeOpts{
	Name:           "kcp_garbage_collector_watched_resources",
	Help:           "Resources (built-in and custom, across all workspaces) the garbage collector runs a watch of. A custom resource is dropped two discoveries after the last CRD serving it in any workspace is deleted.",
	StabilityLevel: metrics.ALPHA,
})

func init() { legacyregistry.MustRegister(watchedResources) }

// countWatched sets watchedResources; c.mu is held.
func (c *Controller) countWatched() {
	n := 0
	for _, info := range c.resources {
		if info.stop != nil {
			n++
		}
	}
	watchedResources.Set(float64(n))
}

// resourceInfo is one watched resource.
type resourceInfo struct {
	gvr        schema.GroupVersionResource
	namespaced bool
	indexer    cache.Indexer
	// stop ends the resource's informer (nil: not watched).
	stop context.CancelFunc
	// missing counts the discoveries in a row that no longer listed it.
	missing int
}

// Controller is the informer and queue plumbing; the work is in reconciler.
type Controller struct {
	queue     workqueue.TypedRateLimitingInterface[item]
	discovery discovery.DiscoveryInterface
	wildcard  metadata.Interface
	// discoveryPeriod: how often discover runs (30 s when 0).
	discoveryPeriod time.Duration

	// rows reads what is stored of a resource (nil: list through the API).
	rows  clusterinformer.RangeFunc
	local *localwatch.Storages

	mu        sync.RWMutex
	resources map[schema.GroupVersionResource]*resourceInfo
	kinds     map[schema.GroupVersionKind]*resourceInfo

	r *reconciler
}

// item is a unit of work: one object of one resource in one cluster, checked
// either as a dependent (are its owners gone?) or as an owner (does it wait
// for its dependents?).
type item struct {
	owner     bool
	cluster   logicalcluster.Name
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

// NewController builds the controller on the server's loopback config.
// Discovery is across all clusters, so the custom resources of every
// cluster's CRDs are collected too; servedVersion (may be nil) tells which
// version of a custom kind a given cluster serves.
func NewController(loopback *rest.Config, servedVersion func(logicalcluster.Name, string, string) (string, bool)) (*Controller, error) {
	wildcard, err := metadata.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	c := &Controller{
		queue:     worker.NewQueue[item](name),
		discovery: disc,
		wildcard:  wildcard,
		resources: map[schema.GroupVersionResource]*resourceInfo{},
		kinds:     map[schema.GroupVersionKind]*resourceInfo{},
	}
	c.r = &reconciler{
		clientFor: func(cluster logicalcluster.Name) (metadata.Interface, error) {
			return clients.Metadata(cluster)
		},
		resourceFor:   c.resourceForKind,
		servedVersion: servedVersion,
		dependents:    c.dependents,
		get:           c.get,
	}
	return c, nil
}

// Run discovers resources (again every 30 s, to pick up new ones) and
// processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	period := c.discoveryPeriod
	if period <= 0 {
		period = 30 * time.Second
	}
	go wait.UntilWithContext(ctx, c.discover, period)
	worker.Run(ctx, name, c.queue, workers, nil, c.process)
}

// SetDiscoveryPeriod sets how often the collector rediscovers resources
// (before Run; 30 s when not set).
func (c *Controller) SetDiscoveryPeriod(d time.Duration) { c.discoveryPeriod = d }

func (c *Controller) discover(ctx context.Context) {
	lists, err := c.discovery.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		klog.V(2).InfoS("garbage collector discovery failed", "err", err)
		return
	}
	seen := sets.New[schema.GroupVersionResource]()
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || skipped.Has(gv.WithResource(r.Name).GroupResource()) {
				continue
			}
			verbs := sets.New(r.Verbs...)
			if !verbs.HasAll("list", "watch", "delete", "patch") {
				continue
			}
			seen.Insert(gv.WithResource(r.Name))
			c.watch(ctx, gv.WithResource(r.Name), gv.WithKind(r.Kind), r.Namespaced)
		}
	}
	if err == nil {
		c.forget(seen)
	}
}

// forgetAfter is how many complete discoveries in a row must miss a
// resource before the collector stops watching it: a custom resource is
// gone from discovery once the last CRD of its name in any cluster is
// deleted, after its objects; the deletions of those objects (owners)
// have been queued by then, and one more round gives their dependents time
// to be looked at while the kind is still known.
const forgetAfter = 2

// forget stops watching the resources that complete discoveries no longer
// list (the last CRD defining one is gone): their informers would fail to
// list and watch forever, and their indexers hold nothing. Seen again, a
// resource is watched again.
func (c *Controller) forget(seen sets.Set[schema.GroupVersionResource]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr, info := range c.resources {
		if seen.Has(gvr) || unwatched.Has(gvr.GroupResource()) {
			info.missing = 0
			continue
		}
		if info.missing++; info.missing < forgetAfter {
			continue
		}
		if info.stop != nil {
			info.stop()
		}
		delete(c.resources, gvr)
		for gvk, i := range c.kinds {
			if i == info {
				delete(c.kinds, gvk)
			}
		}
		klog.V(2).InfoS("garbage collector stopped watching a resource no longer served", "resource", gvr)
	}
	c.countWatched()
}

// unwatched are resources the collector knows, and reads objects of as
// owners, without watching them. LogicalClusters are written by kcp alone
// (admission plugin logicalclusterprotection), never with owner references
// and never deleted through the API: a workspace's deletion removes its
// whole cluster, the LogicalCluster and every dependent with it. A watch of
// them could never tell the collector anything, and its first list would
// read every workspace's LogicalCluster at each start.
var unwatched = sets.New(tenancy.LogicalClustersResource.GroupResource())

func (c *Controller) watch(ctx context.Context, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, namespaced bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.resources[gvr]; ok {
		return
	}
	info := &resourceInfo{gvr: gvr, namespaced: namespaced, indexer: cache.NewIndexer(clusterinformer.KeyFunc, c.indexers())}
	c.resources[gvr] = info
	c.kinds[gvk] = info
	if unwatched.Has(gvr.GroupResource()) {
		return
	}
	res := c.wildcard.Resource(gvr)
	lw := clusterinformer.ListWatch(res.List, res.Watch)
	trim := c.trim
	if local, ok := c.local.ListWatch(gvr, trimmedCopy(gvk)); ok {
		lw = local
		trim = c.trimStored
	}
	if c.rows != nil && listedFromRows.Has(gvr.GroupResource()) {
		lw = clusterinformer.ListWatch(c.listRows(gvr, gvk), lw.WatchFuncWithContext)
	}
	_, ctrl := clusterinformer.NewShared(lw, &metav1.PartialObjectMetadata{}, c.consumer(info, trim))
	ctx, info.stop = context.WithCancel(ctx)
	c.countWatched()
	go ctrl.RunWithContext(ctx)
}

// listedFromRows are the resources whose first list the collector reads
// from the stored rows (ReadRows) rather than through the API server:
// nearly all of their objects are served defaults (storage/serveddefaults),
// which never have owners or finalizers, so the collector would not keep
// one of them; listing them through the API server cost every start a list
// of 700,000 objects at 100,000 workspaces, each encoded by the server and
// decoded here only to be dropped. What the list misses is nothing the
// collector keeps; the watch that follows (through the API server, from the
// list's revision) still tells it of every change and deletion, served
// defaults' included.
var listedFromRows = sets.New(
	schema.GroupResource{Resource: "serviceaccounts"},
	schema.GroupResource{Resource: "configmaps"},
	schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
)

// ReadRows makes the collector list the resources of listedFromRows with
// rows (embeddedkine's RangeRows: stored objects only). Call before Run.
func (c *Controller) ReadRows(rows clusterinformer.RangeFunc) { c.rows = rows }

// WatchLocal makes the collector list and watch the built-in resources in
// process (package localwatch) rather than over the loopback, as metadata
// either way. Call before Run.
func (c *Controller) WatchLocal(local *localwatch.Storages) { c.local = local }

// listRows lists a resource's stored objects as of one revision, as the
// API server would list them (cluster annotation, resourceVersion).
func (c *Controller) listRows(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) func(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	prefix := keys.Prefix + keys.ResourcePrefix(gvr.GroupResource()) + "/"
	return func(ctx context.Context, _ metav1.ListOptions) (*unstructured.UnstructuredList, error) {
		return clusterinformer.ListStored(ctx, c.rows, prefix, gvr.GroupVersion().String(), gvk.Kind+"List",
			func(_ string, value []byte) (*unstructured.Unstructured, error) {
				u := &unstructured.Unstructured{}
				return u, u.UnmarshalJSON(value)
			})
	}
}

// Feed makes another informer's list and watch of a resource feed the
// collector too (through clusterinformer.NewShared, with the returned
// consumer), so that the resource is listed and watched once rather than
// twice. The collector then does not watch it itself. Call before Run.
func (c *Controller) Feed(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, namespaced bool) clusterinformer.Consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := &resourceInfo{gvr: gvr, namespaced: namespaced, indexer: cache.NewIndexer(clusterinformer.KeyFunc, c.indexers())}
	c.resources[gvr] = info
	c.kinds[gvk] = info
	return c.consumer(info, c.trim)
}

func (c *Controller) indexers() cache.Indexers {
	return cache.Indexers{byOwner: func(obj interface{}) ([]string, error) {
		m := obj.(*metav1.PartialObjectMetadata)
		cl := clusterinformer.ClusterOf(m)
		keys := make([]string, 0, len(m.OwnerReferences))
		for _, o := range m.OwnerReferences {
			keys = append(keys, string(cl)+"|"+string(o.UID))
		}
		return keys, nil
	}}
}

// consumer is how the collector's cache of a resource is fed: trimmed to
// metadata, keeping only tracked objects, hearing of every deletion.
func (c *Controller) consumer(info *resourceInfo, trim cache.TransformFunc) clusterinformer.Consumer {
	return clusterinformer.Consumer{
		Indexer: info.indexer,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj interface{}) { c.changed(info, nil, obj) },
			UpdateFunc: func(old, obj interface{}) { c.changed(info, old, obj) },
			DeleteFunc: func(obj interface{}) { c.deleted(info, obj) },
		},
		Trim: trim,
		Keep: tracked,
	}
}

// tracked says whether the collector keeps an object in its cache: one
// with owners (a dependent) or being deleted with a finalizer of ours (an
// owner with work to do). Most objects are neither (an empty workspace has
// none): the collector still hears of their deletion, which is all it needs
// of an owner, and it reads an owner it does not keep with a direct read
// when a dependent of it changes (cached).
func tracked(obj interface{}) bool {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	return ok && (len(m.OwnerReferences) > 0 || hasGCFinalizer(m))
}

// trim keeps what the collector reads of an object: its identity (name,
// namespace, UID, resourceVersion, cluster), owners, finalizers and
// deletion timestamp. Labels, other annotations and timestamps are most of
// the metadata of an object that owns nothing, and the collector holds
// one for every object of every cluster. The annotations (the cluster
// alone) are one map per cluster, shared by its objects (package
// sharedmaps): a map costs about 300 bytes, more than the rest of a
// trimmed object.
// Objects of a fed resource (Feed) come whole, as unstructured objects.
func (c *Controller) trim(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return trimmed(o), nil
	case *metav1.PartialObjectMetadata:
		return trimmed(o), nil
	}
	return obj, nil
}

// trimmed is what trim keeps of an object read through its accessors, as
// copies: the object is only read.
func trimmed(m metav1.Object) *metav1.PartialObjectMetadata {
	out := &metav1.PartialObjectMetadata{ObjectMeta: clusterinformer.TrimmedMetaOf(m)}
	out.DeletionTimestamp = m.GetDeletionTimestamp().DeepCopy()
	out.Finalizers = slices.Clone(m.GetFinalizers())
	for _, o := range m.GetOwnerReferences() {
		out.OwnerReferences = append(out.OwnerReferences, *o.DeepCopy())
	}
	return out
}

// trimStored is trim for a resource watched in process, whose metadata
// objects trimmedCopy has made already (the rows it may list first are
// unstructured and are trimmed).
func (c *Controller) trimStored(obj interface{}) (interface{}, error) {
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return obj, nil
	}
	return c.trim(obj)
}

// trimmedCopy is the collector's copy of an object held by the API
// server's storage (package localwatch): what trim keeps, copied, and
// nothing else, rather than all of the object's metadata, labels and
// annotations included, for trim to drop them at once. The
// object is read through its accessors (the watch cache hands some objects
// wrapped for its serialization cache), and only read.
func trimmedCopy(gvk schema.GroupVersionKind) localwatch.Convert {
	apiVersion, kind := gvk.GroupVersion().String(), gvk.Kind
	return func(obj runtime.Object) (runtime.Object, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		out := trimmed(m)
		out.TypeMeta = metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
		return out, nil
	}
}

func itemFor(info *resourceInfo, m *metav1.PartialObjectMetadata, owner bool) item {
	return item{owner: owner, cluster: clusterinformer.ClusterOf(m), gvr: info.gvr, namespace: m.Namespace, name: m.Name}
}

// changed: an owner being deleted with a finalizer of ours is worked on; an
// object whose owners are not all in the cache is checked as a dependent.
func (c *Controller) changed(info *resourceInfo, _, obj interface{}) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	if m.DeletionTimestamp != nil && hasGCFinalizer(m) {
		c.queue.Add(itemFor(info, m, true))
	}
	if len(m.OwnerReferences) == 0 {
		return
	}
	for _, o := range m.OwnerReferences {
		if !c.cached(clusterinformer.ClusterOf(m), m.Namespace, o) {
			// Give the owner's watch a moment; a direct read decides anyway.
			c.queue.AddAfter(itemFor(info, m, false), time.Second)
			return
		}
	}
}

// deleted: the dependents of a deleted owner are checked; an owner waiting
// in foreground for this dependent is looked at again.
func (c *Controller) deleted(info *resourceInfo, obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	cl := clusterinformer.ClusterOf(m)
	for _, d := range c.dependents(cl, m.UID) {
		c.queue.Add(d)
	}
	for _, o := range m.OwnerReferences {
		if ri := c.resourceForKind(schema.FromAPIVersionAndKind(o.APIVersion, o.Kind)); ri != nil {
			ns := m.Namespace
			if !ri.namespaced {
				ns = ""
			}
			c.queue.Add(item{owner: true, cluster: cl, gvr: ri.gvr, namespace: ns, name: o.Name})
		}
	}
}

func (c *Controller) resourceForKind(gvk schema.GroupVersionKind) *resourceInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if ri, ok := c.kinds[gvk]; ok {
		return ri
	}
	// Another version of the same group and kind is the same objects.
	for k, ri := range c.kinds {
		if k.Group == gvk.Group && k.Kind == gvk.Kind {
			return ri
		}
	}
	return nil
}

// get returns the cached object of an item.
func (c *Controller) get(it item) *metav1.PartialObjectMetadata {
	c.mu.RLock()
	ri := c.resources[it.gvr]
	c.mu.RUnlock()
	if ri == nil {
		return nil
	}
	obj, ok, _ := ri.indexer.GetByKey(clusterinformer.Key(it.cluster, it.namespace, it.name))
	if !ok {
		return nil
	}
	return obj.(*metav1.PartialObjectMetadata)
}

// dependents returns work items for every cached dependent of uid in cluster.
func (c *Controller) dependents(cluster logicalcluster.Name, uid types.UID) []item {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []item
	for _, ri := range c.resources {
		objs, _ := ri.indexer.ByIndex(byOwner, string(cluster)+"|"+string(uid))
		for _, o := range objs {
			out = append(out, itemFor(ri, o.(*metav1.PartialObjectMetadata), false))
		}
	}
	return out
}

// cached reports whether the owner of a reference is in the cache with the
// referenced UID (an owner of a namespaced dependent is looked up in the
// dependent's namespace, or cluster-wide when its kind is cluster-scoped).
func (c *Controller) cached(cluster logicalcluster.Name, namespace string, ref metav1.OwnerReference) bool {
	ri := c.resourceForKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
	if ri == nil {
		return false
	}
	if !ri.namespaced {
		namespace = ""
	}
	obj, ok, _ := ri.indexer.GetByKey(clusterinformer.Key(cluster, namespace, ref.Name))
	return ok && obj.(*metav1.PartialObjectMetadata).UID == ref.UID
}

func (c *Controller) process(ctx context.Context, it item) (time.Duration, error) {
	c.mu.RLock()
	ri := c.resources[it.gvr]
	c.mu.RUnlock()
	if ri == nil {
		return 0, nil
	}
	if it.owner {
		return c.r.processOwner(ctx, ri, it)
	}
	return 0, c.r.processDependent(ctx, ri, it)
}
