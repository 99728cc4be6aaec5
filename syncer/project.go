package syncer

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Projection: what the physical cluster's controllers make of the
// workloads this syncer runs (Pods, ReplicaSets, ControllerRevisions,
// Endpoints, EndpointSlices, Events) is written back into the workspaces,
// read-only, in the user's namespace under the downstream name
// (workload.ProjectedResources; docs/multicluster.md). Per resource, one
// list and watch downstream across the cluster (filtered to the namespaces
// this syncer created before anything is cached) and one upstream across
// the workspaces (the syncer's own projections, through its view).

// pitem is one downstream object to project: resource, downstream
// namespace and name.
type pitem struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

// downstreamNSIndex indexes the upstream namespaces in the view by the name
// of their downstream namespace.
const downstreamNSIndex = "downstreamNamespace"

type projector struct {
	s     *Syncer
	down  map[schema.GroupVersionResource]cache.Indexer
	own   map[schema.GroupVersionResource]cache.Indexer
	infs  []cache.Controller
	queue workqueue.TypedRateLimitingInterface[pitem]

	mu sync.Mutex
	// written: what was last written upstream for an item (its digest and
	// the upstream resourceVersion the write returned).
	written map[pitem]projected
	// deleting: upstream deletes the syncer made itself.
	deleting map[pitem]bool
	// tenantDeleted: projected Pods a tenant deleted upstream, with the
	// downstream UID they were projected from.
	tenantDeleted map[pitem]string
}

type projected struct {
	sum     [32]byte
	version string
}

// newProjector prepares the informers of the projected resources the
// physical cluster serves and the syncer may list and watch there.
func newProjector(s *Syncer, downstream *rest.Config, wild dynamic.Interface) (*projector, error) {
	p := &projector{s: s, down: map[schema.GroupVersionResource]cache.Indexer{}, own: map[schema.GroupVersionResource]cache.Indexer{},
		written: map[pitem]projected{}, deleting: map[pitem]bool{}, tenantDeleted: map[pitem]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[pitem](),
			workqueue.TypedRateLimitingQueueConfig[pitem]{Name: "kcp-syncer-projection"})}
	if err := s.upstream[namespacesGVR].AddIndexers(cache.Indexers{downstreamNSIndex: func(obj interface{}) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil
		}
		return []string{DownstreamNamespace(clusterinformer.ClusterOf(m), m.GetName())}, nil
	}}); err != nil {
		return nil, err
	}
	skip, err := unsyncableFor(context.Background(), downstream, workload.ProjectedResources, []string{"list", "watch"})
	if err != nil {
		return nil, err
	}
	for _, gvr := range workload.ProjectedResources {
		gvr := gvr
		if _, no := skip[gvr]; no {
			continue
		}
		// Downstream: every object of the resource in a namespace this
		// syncer owns, except its own copies of kcp's objects.
		dr := p.s.down.Resource(gvr)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				l, err := dr.List(ctx, o)
				if err != nil {
					return nil, err
				}
				kept := l.Items[:0]
				for _, it := range l.Items {
					if p.wanted(&it) {
						kept = append(kept, it)
					}
				}
				l.Items = kept
				return l, nil
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				w, err := dr.Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
					if m, ok := e.Object.(*unstructured.Unstructured); ok && (e.Type == watch.Added || e.Type == watch.Modified || e.Type == watch.Deleted) {
						return e, p.wanted(m)
					}
					return e, true
				}), nil
			},
		}
		enqueueDown := func(obj interface{}) {
			if m, ok := identityOf(obj); ok {
				p.queue.Add(pitem{gvr: gvr, namespace: m.GetNamespace(), name: m.GetName()})
			}
		}
		didx, dinf := cache.NewTransformingIndexerInformer(lw, &unstructured.Unstructured{}, 0,
			cache.ResourceEventHandlerFuncs{AddFunc: enqueueDown, UpdateFunc: func(_, o interface{}) { enqueueDown(o) }, DeleteFunc: enqueueDown},
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, compact)
		p.down[gvr], p.infs = didx, append(p.infs, dinf)

		// Upstream: this target's projections, in every workspace.
		ur := wild.Resource(gvr)
		sel := workload.ProjectedFromLabel + "=" + s.key
		ulw := clusterinformer.ListWatch(func(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
			o.LabelSelector = sel
			return ur.List(ctx, o)
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return ur.Watch(ctx, o)
		})
		enqueueUp := func(obj interface{}) {
			if m, ok := identityOf(obj); ok {
				p.queue.Add(pitem{gvr: gvr, namespace: DownstreamNamespace(clusterinformer.ClusterOf(m), m.GetNamespace()), name: m.GetName()})
			}
		}
		deleteUp := func(obj interface{}) {
			m, ok := unwrap(obj).(*unstructured.Unstructured)
			if !ok {
				return
			}
			it := pitem{gvr: gvr, namespace: DownstreamNamespace(clusterinformer.ClusterOf(m), m.GetNamespace()), name: m.GetName()}
			p.mu.Lock()
			if p.deleting[it] {
				delete(p.deleting, it)
			} else if gvr == podsGVR {
				p.tenantDeleted[it] = m.GetAnnotations()[workload.DownstreamUIDAnnotation]
			}
			delete(p.written, it)
			p.mu.Unlock()
			p.queue.Add(it)
		}
		// Only the projections' identity is kept (trimProjection).
		uidx, uinf := clusterinformer.NewTrimmed(ulw, &unstructured.Unstructured{}, clusterinformer.ClusterIndexers,
			cache.ResourceEventHandlerFuncs{AddFunc: func(o interface{}) { enqueueUp(o); p.ownerAppeared(gvr, o) },
				UpdateFunc: func(_, o interface{}) { enqueueUp(o) }, DeleteFunc: deleteUp}, trimProjection)
		p.own[gvr], p.infs = uidx, append(p.infs, uinf)
	}
	return p, nil
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// wanted: a downstream object in a namespace of this syncer that is not
// the syncer's own copy of a kcp object.
func (p *projector) wanted(m *unstructured.Unstructured) bool {
	// The syncer's copy of a kcp object carries its label and the
	// upstream annotations (an Endpoints or EndpointSlice copies its
	// Service's labels, not its annotations: it is projected).
	if _, mine := m.GetLabels()[TargetLabel]; mine && m.GetAnnotations()[UpstreamClusterAnnotation] != "" {
		return false
	}
	_, _, ok := p.upstreamNamespace(m.GetNamespace())
	return ok
}

// upstreamNamespace maps a downstream namespace of this syncer to its
// workspace and namespace: from the downstream namespace (labelled and
// annotated by the syncer), or, before that one is seen, from the
// upstream namespace in the view it is made for.
func (p *projector) upstreamNamespace(dns string) (logicalcluster.Name, string, bool) {
	if !strings.HasPrefix(dns, "kcp-") {
		return "", "", false
	}
	if ns, ok := p.s.downstreamObj(namespacesGVR, "", dns); ok {
		a := ns.GetAnnotations()
		if cl, err := logicalcluster.Parse(a[UpstreamClusterAnnotation]); err == nil && a[UpstreamNamespaceAnnotation] != "" {
			return cl, a[UpstreamNamespaceAnnotation], true
		}
	}
	objs, _ := p.s.upstream[namespacesGVR].ByIndex(downstreamNSIndex, dns)
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		return clusterinformer.ClusterOf(m), m.GetName(), true
	}
	return "", "", false
}

// ownerAppeared looks again at the downstream objects of a namespace that
// an object now upstream may own (an owner that could not be resolved
// before was dropped).
func (p *projector) ownerAppeared(gvr schema.GroupVersionResource, obj interface{}) {
	m, ok := identityOf(obj)
	if !ok {
		return
	}
	kindOf, _ := unwrapped(obj).(runtime.Object)
	if kindOf == nil {
		return
	}
	ownerKind := kindOf.GetObjectKind().GroupVersionKind().Kind
	dns := DownstreamNamespace(clusterinformer.ClusterOf(m), m.GetNamespace())
	for r, idx := range p.down {
		objs, _ := idx.ByIndex(cache.NamespaceIndex, dns)
		for _, o := range objs {
			if st, ok := o.(*stored); ok {
				// What it names was kept apart: no decoding.
				if st.names(ownerKind, m.GetName()) {
					p.queue.Add(pitem{gvr: r, namespace: dns, name: st.Name})
				}
				continue
			}
			d := object(o)
			for _, ref := range d.GetOwnerReferences() {
				if ref.Name == m.GetName() && ref.Kind == ownerKind {
					p.queue.Add(pitem{gvr: r, namespace: dns, name: d.GetName()})
				}
			}
			// An Event about it gets its UID.
			kind, _, _ := unstructured.NestedString(d.Object, "involvedObject", "kind")
			name, _, _ := unstructured.NestedString(d.Object, "involvedObject", "name")
			if r.Resource == "events" && kind == ownerKind && name == m.GetName() {
				p.queue.Add(pitem{gvr: r, namespace: dns, name: d.GetName()})
			}
		}
	}
}

// run starts the informers once the syncer's own caches are filled (the
// namespaces it owns are known), then works the queue until ctx ends.
func (p *projector) run(ctx context.Context, workers int) {
	defer p.queue.ShutDown()
	synced := make([]cache.InformerSynced, 0, len(p.infs))
	for _, inf := range p.infs {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	klog.InfoS("syncer projecting", "syncTarget", p.s.target, "resources", len(p.down))
	for i := 0; i < workers; i++ {
		go func() {
			for p.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
}

func (p *projector) next(ctx context.Context) bool {
	it, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(it)
	after, err := p.reconcileSafely(ctx, it)
	switch {
	case err != nil:
		klog.InfoS("projection: will retry", "item", it, "err", err)
		p.queue.AddRateLimited(it)
	case after > 0:
		p.queue.Forget(it)
		p.queue.AddAfter(it, after)
	default:
		p.queue.Forget(it)
	}
	return true
}

// isOwnerKind: upstream objects of gvr may own projected objects.
func isOwnerKind(gvr schema.GroupVersionResource) bool {
	for _, r := range ownerKinds {
		if r == gvr {
			return true
		}
	}
	return false
}

// enqueueUpstreamOwner is called for upstream objects that projected
// objects may name as owners (Deployments, StatefulSets, ...).
func (p *projector) enqueueUpstreamOwner(obj interface{}) {
	if p != nil {
		p.ownerAppeared(schema.GroupVersionResource{}, obj)
	}
}

// time to look again at an object whose owner is not upstream yet.
const ownerRetry = 5 * time.Second
