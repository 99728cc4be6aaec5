package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/panics"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Labels and annotations the syncer writes downstream.
const (
	// TargetLabel marks every namespace and object the syncer owns
	// downstream with its target key.
	TargetLabel = "workload.kcp.io/sync-target"
	// UpstreamClusterAnnotation and UpstreamNamespaceAnnotation map a
	// downstream namespace or object back to kcp.
	UpstreamClusterAnnotation   = "workload.kcp.io/upstream-cluster"
	UpstreamNamespaceAnnotation = "workload.kcp.io/upstream-namespace"
	// UpstreamGenerationAnnotation is the kcp generation a downstream copy
	// was written from (status maps observedGeneration back with it).
	UpstreamGenerationAnnotation = "workload.kcp.io/upstream-generation"
	// FieldManager owns what the syncer applies downstream.
	FieldManager = "kcp-syncer"
)

var namespacesGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

// DownstreamNamespace is the physical cluster's namespace for a namespace
// of a logical cluster: a hash of both, so that equal names in different
// workspaces never meet.
func DownstreamNamespace(cluster logicalcluster.Name, namespace string) string {
	sum := sha256.Sum256([]byte(string(cluster) + "/" + namespace))
	return "kcp-" + hex.EncodeToString(sum[:])[:16]
}

// Syncer copies the objects assigned to one SyncTarget to its physical
// cluster and their status back.
type Syncer struct {
	// OutOfCapacityAfter is how long a pod of kcp's workloads must have
	// been unschedulable before the cluster is reported out of capacity
	// (0: DefaultOutOfCapacityAfter). Set before Run.
	OutOfCapacityAfter time.Duration

	location  logicalcluster.Name
	target    string
	key       string
	resources []schema.GroupVersionResource

	viewBase string // https://kcp/services/syncer/<location>/<target>
	upConfig *rest.Config
	down     dynamic.Interface

	mu     sync.Mutex
	upByCl map[logicalcluster.Name]dynamic.Interface
	// upHTTP is the one HTTP client (connections, TLS, credentials) of
	// every workspace's client of the view.
	upHTTP   *http.Client
	applied  map[item]applied
	upstream map[schema.GroupVersionResource]cache.Indexer
	dstream  map[schema.GroupVersionResource]cache.Indexer
	queue    workqueue.TypedRateLimitingInterface[item]
	infs     []cache.Controller
	// unsynced are resources kept upstream only (unsyncable), and why.
	unsynced map[schema.GroupVersionResource]string
	// conflicts are the objects not written because something kcp did
	// not create has their place downstream (conflicts.go), and why.
	conflicts map[item]string

	// inFlight counts items being processed; caughtUp is set once the
	// queue has been empty with nothing in flight after the first lists.
	inFlight atomic.Int64
	caughtUp atomic.Bool

	// podSecurity is the SyncTarget's pod security level (nil until the
	// heartbeat has read the SyncTarget).
	podSecurity atomic.Pointer[string]
	// proj projects what the physical cluster runs into the workspaces
	// (project.go).
	proj *projector
	// api gives the pods the syncer runs their workspace's API
	// (apiaccess.go).
	api apiAccess
	// capacity follows what the physical cluster can hold, for overflow
	// divisions (overflow.go); runCtx is Run's context.
	capacity *capacityWatch
	runCtx   atomic.Pointer[context.Context]
}

// CaughtUp reports whether the syncer has gone through everything on
// both sides once since it started (stale copies deleted included).
func (s *Syncer) CaughtUp() bool { return s.caughtUp.Load() }

// watchCatchUp sets caughtUp once the queue that the first lists filled
// has drained: empty, nothing in flight, twice in a row.
func (s *Syncer) watchCatchUp(ctx context.Context) {
	idle := 0
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		if s.queue.Len() == 0 && s.inFlight.Load() == 0 {
			idle++
		} else {
			idle = 0
		}
		return idle >= 2, nil
	})
	if ctx.Err() == nil {
		s.caughtUp.Store(true)
		klog.InfoS("syncer caught up", "syncTarget", s.target)
	}
}

// item is one object to reconcile: a resource and its upstream key.
type item struct {
	gvr       schema.GroupVersionResource
	cluster   logicalcluster.Name
	namespace string
	name      string
}

// SplitServer splits a kcp kubeconfig's server URL into the server's base
// URL and the workspace it points at (root when it names none).
func SplitServer(host string) (string, logicalcluster.Name, error) {
	base, path, found := strings.Cut(host, "/clusters/")
	if !found {
		return strings.TrimSuffix(host, "/"), logicalcluster.Root, nil
	}
	cl, err := logicalcluster.Parse(strings.TrimSuffix(path, "/"))
	return base, cl, err
}

// NewSyncer prepares a syncer for SyncTarget target, whose kcp kubeconfig
// (pointing at the target's workspace) is upstream.
func NewSyncer(upstream *rest.Config, target string, downstream *rest.Config, resources []schema.GroupVersionResource) (*Syncer, error) {
	base, location, err := SplitServer(upstream.Host)
	if err != nil {
		return nil, fmt.Errorf("the kcp kubeconfig's server %q: %v", upstream.Host, err)
	}
	down, err := dynamic.NewForConfig(downstream)
	if err != nil {
		return nil, err
	}
	s := &Syncer{
		location: location, target: target, key: workload.TargetKey(string(location), target), resources: resources,
		viewBase: base + "/services/syncer/" + string(location) + "/" + target,
		upConfig: rest.CopyConfig(upstream), down: down,
		upByCl: map[logicalcluster.Name]dynamic.Interface{}, applied: map[item]applied{},
		upstream: map[schema.GroupVersionResource]cache.Indexer{}, dstream: map[schema.GroupVersionResource]cache.Indexer{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[item](),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: "kcp-syncer"}),
	}
	if s.upHTTP, err = rest.HTTPClientFor(s.upConfig); err != nil {
		return nil, err
	}
	wild, err := s.upClient(logicalcluster.Wildcard)
	if err != nil {
		return nil, err
	}
	if s.unsynced, err = unsyncable(context.Background(), downstream, resources); err != nil {
		return nil, err
	}
	if s.capacity, err = newCapacityWatch(downstream); err != nil {
		return nil, err
	}
	for _, gvr := range append([]schema.GroupVersionResource{namespacesGVR}, resources...) {
		gvr := gvr
		// Upstream: one list and one watch per resource across every
		// workspace placed on this target (the view filters by label).
		r := wild.Resource(gvr)
		enqueueUp := func(obj interface{}) {
			if m, ok := identityOf(obj); ok {
				s.queue.Add(item{gvr: gvr, cluster: clusterinformer.ClusterOf(m), namespace: m.GetNamespace(), name: m.GetName()})
			}
		}
		addUp := enqueueUp
		if isOwnerKind(gvr) {
			// Projections whose owner was not upstream yet get it now.
			addUp = func(obj interface{}) { enqueueUp(obj); s.proj.enqueueUpstreamOwner(obj) }
		}
		updateUp := func(old, o interface{}) { enqueueUp(o) }
		if gvr == namespacesGVR {
			// A namespace's placement policy decides shares and overrides
			// of every object in it: a change re-syncs them.
			updateUp = func(old, o interface{}) {
				enqueueUp(o)
				before, after := object(old), object(o)
				if before.GetAnnotations()[workload.NamespacePolicyAnnotation] != after.GetAnnotations()[workload.NamespacePolicyAnnotation] {
					s.enqueueNamespace(clusterinformer.ClusterOf(after), after.GetName())
				}
			}
		}
		// A copy of the shared indexers: the projector adds one of its own
		// to the namespaces' indexer, which must not reach the shared map
		// (every informer built from it, the other syncers of a push-mode
		// kcp included).
		indexers := cache.Indexers{}
		for k, v := range clusterinformer.ClusterIndexers {
			indexers[k] = v
		}
		idx, inf := clusterinformer.NewTrimmed(clusterinformer.ListWatch(r.List, r.Watch), &unstructured.Unstructured{}, indexers,
			cache.ResourceEventHandlerFuncs{AddFunc: addUp, UpdateFunc: updateUp, DeleteFunc: enqueueUp}, compactFor(gvr.Resource))
		s.upstream[gvr], s.infs = idx, append(s.infs, inf)
		if _, skip := s.unsynced[gvr]; skip {
			continue
		}

		// Downstream: what this syncer wrote, found by its label.
		dr := down.Resource(gvr)
		sel := TargetLabel + "=" + s.key
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return dr.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				return dr.Watch(ctx, o)
			},
		}
		enqueueDown := func(obj interface{}) {
			m, ok := unwrap(obj).(*unstructured.Unstructured)
			if !ok {
				return
			}
			a := m.GetAnnotations()
			cl, err := logicalcluster.Parse(a[UpstreamClusterAnnotation])
			if err != nil {
				return
			}
			it := item{gvr: gvr, cluster: cl, namespace: a[UpstreamNamespaceAnnotation], name: m.GetName()}
			if gvr == namespacesGVR {
				it.name, it.namespace = a[UpstreamNamespaceAnnotation], ""
			}
			s.queue.Add(it)
		}
		didx, dinf := cache.NewTransformingIndexerInformer(lw, &unstructured.Unstructured{}, 0,
			cache.ResourceEventHandlerFuncs{AddFunc: enqueueDown, UpdateFunc: func(_, o interface{}) { enqueueDown(o) }, DeleteFunc: enqueueDown},
			cache.Indexers{}, compact)
		s.dstream[gvr], s.infs = didx, append(s.infs, dinf)
	}
	if s.proj, err = newProjector(s, downstream, wild); err != nil {
		return nil, err
	}
	if e := defaultEndpoint(upstream); e != nil {
		s.api.defaults.Store(e)
	}
	inf, err := s.newAPIAccessInformer(downstream)
	if err != nil {
		return nil, err
	}
	s.infs = append(s.infs, inf)
	return s, nil
}

// enqueueNamespace queues every object of one upstream namespace.
func (s *Syncer) enqueueNamespace(cluster logicalcluster.Name, namespace string) {
	for _, gvr := range s.resources {
		objs, _ := s.upstream[gvr].ByIndex(clusterinformer.ByClusterNamespace, string(cluster)+"|"+namespace)
		for _, o := range objs {
			if m, err := meta.Accessor(o); err == nil {
				s.queue.Add(item{gvr: gvr, cluster: cluster, namespace: namespace, name: m.GetName()})
			}
		}
	}
}

// policy is the placement policy of an upstream namespace (nil: one
// target, Duplicate), and whether the namespace is in the view at all.
func (s *Syncer) policy(cluster logicalcluster.Name, namespace string) (*workload.NamespacePolicy, bool) {
	obj, ok, _ := s.upstream[namespacesGVR].GetByKey(clusterinformer.Key(cluster, "", namespace))
	if !ok {
		return nil, false
	}
	p, err := workload.ParsePolicy(object(obj).GetAnnotations())
	if err != nil {
		klog.V(2).InfoS("ignoring a namespace's placement policy", "cluster", cluster, "namespace", namespace, "err", err)
		return nil, true
	}
	return p, true
}

// unwrap is a handler's object: a cached one decoded (object), a
// DeletedFinalStateUnknown's object.
func unwrap(obj interface{}) interface{} {
	if m := object(obj); m != nil {
		return m
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// upClient is a client of the syncer view in one cluster (or all).
func (s *Syncer) upClient(cluster logicalcluster.Name) (dynamic.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.upByCl[cluster]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(s.upConfig)
	cfg.Host = s.viewBase + "/clusters/" + string(cluster)
	c, err := dynamic.NewForConfigAndClient(cfg, s.upHTTP)
	if err != nil {
		return nil, err
	}
	s.upByCl[cluster] = c
	return c, nil
}

// Run syncs until ctx ends.
func (s *Syncer) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer s.queue.ShutDown()
	s.runCtx.Store(&ctx)
	synced := make([]cache.InformerSynced, 0, len(s.infs))
	for _, inf := range s.infs {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	klog.InfoS("syncer started", "syncTarget", s.target, "location", s.location, "resources", len(s.resources))
	go s.watchCatchUp(ctx)
	go s.proj.run(ctx, workers)
	go s.renewTokens(ctx)
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for s.next(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func (s *Syncer) next(ctx context.Context) bool {
	it, quit := s.queue.Get()
	if quit {
		return false
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	defer s.queue.Done(it)
	var after time.Duration
	err := panics.Recover("syncer", func() (err error) {
		if it.gvr == namespacesGVR {
			return s.syncNamespace(ctx, it)
		}
		after, err = s.syncObject(ctx, it)
		return err
	})
	var p *panics.Error
	switch {
	case errors.As(err, &p):
		// A tenant's object the syncer cannot handle: reported and
		// retried with backoff; the other workloads go on.
		klog.ErrorS(err, "syncing an object panicked; retrying it with backoff", "item", it, "stack", string(p.Stack))
		s.queue.AddRateLimited(it)
	case err != nil:
		klog.V(2).InfoS("will retry", "item", it, "err", err)
		s.queue.AddRateLimited(it)
	case after > 0:
		s.queue.Forget(it)
		s.queue.AddAfter(it, after)
	default:
		s.queue.Forget(it)
	}
	return true
}

func (s *Syncer) upstreamObj(it item) (*unstructured.Unstructured, bool) {
	obj, ok, _ := s.upstream[it.gvr].GetByKey(clusterinformer.Key(it.cluster, it.namespace, it.name))
	if !ok {
		return nil, false
	}
	return object(obj), true
}

func (s *Syncer) downstreamObj(gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, bool) {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok, _ := s.dstream[gvr].GetByKey(key)
	if !ok {
		return nil, false
	}
	return object(obj), true
}

// syncObject moves one object's spec down and status up, and deletes the
// downstream copy first when the upstream object goes.
func (s *Syncer) syncObject(ctx context.Context, it item) (after time.Duration, retErr error) {
	if _, skip := s.unsynced[it.gvr]; skip {
		// Nothing of it runs here: only a deletion's finalizer to remove.
		if up, ok := s.upstreamObj(it); ok && up.GetDeletionTimestamp() != nil {
			return 0, s.removeFinalizer(ctx, it, up)
		}
		return 0, nil
	}
	dns := DownstreamNamespace(it.cluster, it.namespace)
	dr := s.down.Resource(it.gvr).Namespace(dns)
	up, ok := s.upstreamObj(it)
	down, downExists := s.downstreamObj(it.gvr, dns, it.name)
	if it.gvr == hpasGVR {
		s.enqueueScaleTarget(it, up, down)
	}
	if pol, _ := s.policy(it.cluster, it.namespace); pol.Suspended(s.key) {
		// Suspended (suspend.go): nothing downstream changes, only status
		// goes up.
		return 0, s.whileSuspended(ctx, it, up, ok, down, pol)
	}
	if !ok || up.GetDeletionTimestamp() != nil {
		s.forget(it)
		s.resolved(it)
	}
	if !ok {
		// Deleted, or no longer assigned to this target; its namespace may
		// be left empty.
		s.queue.Add(item{gvr: namespacesGVR, cluster: it.cluster, name: it.namespace})
		if !downExists {
			return 0, nil
		}
		return 0, ignoreNotFound(dr.Delete(ctx, it.name, metav1.DeleteOptions{}))
	}
	if up.GetDeletionTimestamp() != nil {
		if downExists {
			if err := dr.Delete(ctx, it.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return 0, err
			}
		}
		// Check the physical cluster itself, not the cache: the finalizer
		// goes only once the copy is really gone. An object of that name
		// that is not the syncer's (a refused conflict) is not its copy.
		if obj, err := dr.Get(ctx, it.name, metav1.GetOptions{}); err == nil && obj.GetLabels()[TargetLabel] == s.key {
			return time.Second, nil
		} else if err != nil && !apierrors.IsNotFound(err) {
			return 0, err
		}
		return 0, s.removeFinalizer(ctx, it, up)
	}
	var nsConflict errNamespaceConflict
	if err := s.ensureNamespace(ctx, it.cluster, it.namespace); err == errNamespaceTerminating || err == errLevelUnknown {
		// Look again in a second rather than back off for minutes.
		return time.Second, nil
	} else if errors.As(err, &nsConflict) {
		return conflictRecheck, s.refuse(ctx, it, up, nsConflict.reason)
	} else if err != nil {
		return 0, err
	}
	pol, nsInView := s.policy(it.cluster, it.namespace)
	if !nsInView {
		// kcp labels a namespace's objects before the namespace itself;
		// without the namespace's policy this target's share is unknown
		// (writing the whole Deployment would run it several times over).
		return time.Second, nil
	}
	if ok, why := s.runsHere(it.gvr, up, pol); !ok {
		return 0, s.notHere(ctx, it, down, why)
	}
	if s.heldByRollout(it, up, down, pol) {
		// Not released by a progressive rollout yet (rollout.go): the
		// copy here keeps the old spec, its status goes up.
		return 0, s.statusUp(ctx, it, up, down, pol)
	}
	if pol != nil && pol.Targets[s.key].Leaving {
		// Being drained: the copy here runs on as it is until kcp hands
		// the namespace to the other targets; nothing new starts here.
		if down == nil {
			return 0, nil
		}
		return 0, s.statusUp(ctx, it, up, down, pol)
	}
	if down == nil {
		// No copy of the syncer's: is the name taken by someone else's?
		why, err := s.checkConflict(ctx, it, dr, dns, pol)
		if err != nil {
			return 0, err
		}
		if why != "" {
			return conflictRecheck, s.refuse(ctx, it, up, why)
		}
	}
	desired, err := s.downstreamCopy(up, dns)
	if err != nil {
		return 0, err
	}
	if err := s.applyPolicy(it.gvr, up, desired, pol); err != nil {
		return 0, err
	}
	if it.gvr == deploymentsGVR && pol.Overflow() {
		// What the clusters can hold changes with what else runs there.
		defer func() {
			if after == 0 && retErr == nil {
				after = overflowRecheck
			}
		}()
	}
	var sa string
	if !legacyPod(it.gvr.Resource, down) {
		if sa, err = s.redirectPods(it.gvr.Resource, up, desired); err != nil {
			return 0, err
		}
	}
	if sa != "" {
		// The pods wait for their token's Secret (the kubelet retries the
		// mount), so the workload is applied even when kcp cannot issue
		// it yet (its ServiceAccount does not exist yet): looked at again.
		if err := s.ensureAPIAccess(ctx, it.cluster, it.namespace, dns, sa); err != nil {
			klog.V(2).InfoS("no workspace token for the pods yet", "item", it, "err", err)
			defer func() {
				if after == 0 && retErr == nil {
					after = 5 * time.Second
				}
			}()
		}
	}
	if s.scaledByAutoscaler(it) {
		leaveReplicas(desired, down)
	}
	body, err := json.Marshal(desired.Object)
	if err != nil {
		return 0, err
	}
	// Apply only when there is something to apply: what kcp wants changed,
	// or the downstream copy changed other than in status (drift: its
	// generation, or for kinds without one its resourceVersion). Status
	// changes, and the echoes of the syncer's own status writes, cost no
	// request downstream.
	sum := sha256.Sum256(body)
	if down != nil && s.unchanged(it, sum, down) {
		return 0, s.statusUp(ctx, it, up, down, pol)
	}
	force := true
	applied, err := dr.Patch(ctx, it.name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return 0, fmt.Errorf("applying %s %s/%s downstream: %v", it.gvr.Resource, dns, it.name, err)
	}
	s.remember(it, sum, applied)
	s.resolved(it)
	// The apply answered with the newest downstream state.
	return 0, s.statusUp(ctx, it, up, applied, pol)
}

// applied records what the syncer last applied to a downstream object and
// what the object looked like then.
type applied struct {
	sum        [32]byte
	generation int64
	version    string
}

func (s *Syncer) unchanged(it item, sum [32]byte, down *unstructured.Unstructured) bool {
	s.mu.Lock()
	a, ok := s.applied[it]
	s.mu.Unlock()
	if !ok || a.sum != sum {
		return false
	}
	if down.GetGeneration() > 0 {
		return down.GetGeneration() == a.generation
	}
	return down.GetResourceVersion() == a.version
}

func (s *Syncer) remember(it item, sum [32]byte, obj *unstructured.Unstructured) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[it] = applied{sum: sum, generation: obj.GetGeneration(), version: obj.GetResourceVersion()}
}

func (s *Syncer) forget(it item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.applied, it)
}

// downstreamCopy is what the syncer applies: the upstream object without
// its server-set metadata and status, in the downstream namespace, with
// the mapping annotations; fields the physical cluster allocates itself
// (a Service's cluster IPs and node ports) are left to it.
func (s *Syncer) downstreamCopy(up *unstructured.Unstructured, namespace string) (*unstructured.Unstructured, error) {
	out := &unstructured.Unstructured{Object: map[string]interface{}{}}
	for k, v := range up.Object {
		if k != "metadata" && k != "status" {
			out.Object[k] = runtimeDeepCopy(v)
		}
	}
	out.SetName(up.GetName())
	out.SetNamespace(namespace)
	labels := map[string]string{}
	for k, v := range up.GetLabels() {
		if !strings.HasPrefix(k, workload.StateLabelPrefix) {
			labels[k] = v
		}
	}
	labels[TargetLabel] = s.key
	out.SetLabels(labels)
	ann := map[string]string{}
	for k, v := range up.GetAnnotations() {
		if k != logicalcluster.Annotation && k != "kubectl.kubernetes.io/last-applied-configuration" && k != workload.AssignedTargetAnnotation &&
			!strings.HasPrefix(k, workload.StatusAnnotationPrefix) && k != workload.AllocationsAnnotation && k != workload.RolloutAnnotation {
			ann[k] = v
		}
	}
	ann[UpstreamClusterAnnotation] = string(clusterinformer.ClusterOf(up))
	ann[UpstreamNamespaceAnnotation] = up.GetNamespace()
	ann[UpstreamGenerationAnnotation] = fmt.Sprint(up.GetGeneration())
	out.SetAnnotations(ann)
	switch up.GetKind() {
	case "Job":
		jobWithoutSelector(out)
	case "Pod":
		podForDownstream(out)
	}
	if up.GetKind() == "NetworkPolicy" {
		rewriteNetworkPolicy(out, clusterinformer.ClusterOf(up))
	}
	if up.GetKind() == "RoleBinding" {
		if err := rewriteRoleBinding(out, clusterinformer.ClusterOf(up), up.GetNamespace()); err != nil {
			return nil, err
		}
	}
	if up.GetKind() == "Service" {
		serviceForDownstream(out)
	}
	return out, nil
}

func runtimeDeepCopy(v interface{}) interface{} {
	return (&unstructured.Unstructured{Object: map[string]interface{}{"v": v}}).DeepCopy().Object["v"]
}

// removeFinalizer lets kcp delete an object whose downstream copy is gone.
func (s *Syncer) removeFinalizer(ctx context.Context, it item, up *unstructured.Unstructured) error {
	f := workload.FinalizerPrefix + s.key
	for i, have := range up.GetFinalizers() {
		if have != f {
			continue
		}
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		patch, _ := json.Marshal([]map[string]interface{}{{"op": "test", "path": path, "value": f}, {"op": "remove", "path": path}})
		c, err := s.upClient(it.cluster)
		if err != nil {
			return err
		}
		_, err = c.Resource(it.gvr).Namespace(it.namespace).Patch(ctx, it.name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if err == nil {
			klog.V(2).InfoS("downstream copy deleted; finalizer removed", "resource", it.gvr.Resource, "cluster", it.cluster, "namespace", it.namespace, "name", it.name)
		}
		return ignoreNotFound(err)
	}
	return nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	daemonsetsGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
)

func firstKey(pol *workload.NamespacePolicy) string {
	first := ""
	for k := range pol.Targets {
		if first == "" || k < first {
			first = k
		}
	}
	return first
}
