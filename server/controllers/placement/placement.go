// Package placement assigns namespaces to physical clusters. For every
// namespace that a Placement of its workspace selects, it picks one Ready,
// schedulable SyncTarget of the Placement's location workspace (matching its
// locationSelector), and records the choice as data the syncer can select
// by: the label state.workload.kcp.io/<target key>=Sync on the namespace and
// on every object of a synced resource in it, with the target's finalizer
// on each object (its syncer removes it once the downstream copy is gone).
// An assignment sticks while its target still matches the Placement and is
// Ready; a namespace whose target has been NotReady for the eviction delay
// moves to another usable target (failover: the syncer of the returning
// cluster deletes the stale copies, which have left its view). Taints of
// the targets and tolerations of the Placement decide as on nodes
// (placement_reconcile_taints.go): a NotReady target carries kcp's
// not-ready NoExecute taint, tolerated for the eviction delay unless the
// Placement says otherwise, and evictions are rate limited per target.
//
// One controller for all clusters: one watch each of Placements,
// namespaces and SyncTargets across all logical clusters, and a queue
// keyed by namespace (and Placement, for its status).
package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	placementadmission "github.com/kcpsql/kcp/server/admission/placement"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/server/placementexpr"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const (
	name         = "kcp-placement"
	fieldManager = "kcp-placement"
	byLocation   = "location"
	// resync looks at assigned namespaces again now and then, a backstop
	// for objects of negotiated resources created while their namespace
	// was being assigned that the look afterChange missed (each look lists
	// the namespace's negotiated resources: with many namespaces, often is
	// expensive).
	resync = 10 * time.Minute
	// afterChange is when a namespace whose assignment changed is looked
	// at again, if it has objects of negotiated resources (listed, not
	// watched), or while it drains or rebalances.
	afterChange = 2 * time.Second
	// statusDelay is how long a Placement's status waits for more changes
	// of its namespaces (enqueuePlacements).
	statusDelay = time.Second
)

// Controller assigns namespaces and keeps Placement status.
type Controller struct {
	queue      workqueue.TypedRateLimitingInterface[string]
	placements cache.Indexer
	namespaces cache.Indexer
	// sharedNamespaces is the server's namespace informer; onNamespace is
	// added to it while the controller runs.
	sharedNamespaces *clusterinformer.Namespaces
	onNamespace      cache.ResourceEventHandler
	targets          cache.Indexer
	informers        []cache.Controller
	clients          *clusterinformer.Clients
	// evictionDelay is how long a namespace stays on a NotReady target
	// before it moves to another one.
	evictionDelay time.Duration
	// negotiated tells which negotiated resources a cluster is served.
	negotiated Negotiated
	// drains tallies what is still on draining targets
	// (placement_reconcile_drain.go).
	drains *drains
	// limiter bounds how fast targets start evicting
	// (placement_reconcile_taints.go).
	limiter *evictionLimiter
	// objects are the caches of the built-in synced resources
	// (placement_objects.go).
	objects []objects
}

// Negotiated tells which negotiated resources (not built in) a cluster is
// served through its bindings to its locations' exports, and which those
// exports offer.
type Negotiated interface {
	Resources(logicalcluster.Name) []schema.GroupVersionResource
	Offered(logicalcluster.Name) []schema.GroupVersionResource
	// HasBinding reports whether the cluster has an APIBinding by this
	// name.
	HasBinding(cluster logicalcluster.Name, name string) bool
}

// NewController watches Placements, namespaces and SyncTargets of all
// logical clusters.
func NewController(loopback *rest.Config, evictionDelay time.Duration, evictionRate float64, negotiated Negotiated, namespaces *clusterinformer.Namespaces, local *localwatch.Storages) (*Controller, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	wildcardMeta, err := metadata.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name), clients: clients, evictionDelay: evictionDelay, negotiated: negotiated, drains: newDrains(),
		limiter: newEvictionLimiter(evictionRate)}

	placementIndexers := cache.Indexers{byLocation: func(obj interface{}) ([]string, error) {
		loc, _, _ := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "spec", "locationWorkspace")
		return []string{loc}, nil
	}}
	for k, v := range clusterinformer.ClusterIndexers {
		placementIndexers[k] = v
	}
	// A new, changed or deleted Placement's status is written at once
	// (what a user who applies it looks at next).
	onPlacement := func(obj interface{}, statusNow bool) {
		if m, err := meta.Accessor(unwrap(obj)); err == nil {
			c.enqueueCluster(clusterinformer.ClusterOf(m), statusNow)
		}
	}
	pl := wildcard.Resource(workload.PlacementsResource)
	var pinf, tinf cache.Controller
	c.placements, pinf = clusterinformer.New(clusterinformer.ListWatch(pl.List, pl.Watch), &unstructured.Unstructured{}, placementIndexers,
		cache.ResourceEventHandlerFuncs{AddFunc: func(o interface{}) { onPlacement(o, true) }, UpdateFunc: func(old, o interface{}) {
			// Its own status writes change nothing the namespaces read.
			if a, b := old.(*unstructured.Unstructured), o.(*unstructured.Unstructured); a.GetGeneration() == b.GetGeneration() && a.GetGeneration() != 0 &&
				a.GetDeletionTimestamp().Equal(b.GetDeletionTimestamp()) && slices.Equal(a.GetFinalizers(), b.GetFinalizers()) {
				return
			}
			onPlacement(o, true)
		}, DeleteFunc: func(o interface{}) { onPlacement(o, true) }})

	onNamespace := func(obj interface{}) {
		m, err := meta.Accessor(unwrap(obj))
		if err != nil {
			return
		}
		// Only a namespace a Placement of its workspace could select, or
		// one that carries an earlier assignment, has anything to do here.
		// The others (with many empty workspaces, nearly all of them) are
		// not queued: queueing each of 300,000 namespaces at start-up cost
		// CPU and left the queue's maps at that size for good. A Placement
		// that arrives later queues its workspace's namespaces itself.
		cluster := clusterinformer.ClusterOf(m)
		if !c.hasPlacements(cluster) && !carriesAssignment(m) {
			return
		}
		if key, err := clusterinformer.KeyFunc(unwrap(obj)); err == nil {
			c.queue.Add("ns:" + key)
		}
		// A Placement counts its workspace's assigned namespaces.
		c.enqueuePlacements(cluster)
	}
	c.sharedNamespaces = namespaces
	c.namespaces = namespaces.Indexer()
	c.onNamespace = cache.ResourceEventHandlerFuncs{AddFunc: onNamespace, UpdateFunc: func(_, o interface{}) { onNamespace(o) }, DeleteFunc: onNamespace}

	onTarget := func(obj interface{}) {
		m, err := meta.Accessor(unwrap(obj))
		if err != nil {
			return
		}
		// A location's targets concern every workspace that places there:
		// their namespaces at once, their Placements' status after the
		// namespaces had a moment to move (one write, not two).
		users, _ := c.placements.ByIndex(byLocation, string(clusterinformer.ClusterOf(m)))
		for _, u := range users {
			c.enqueueCluster(clusterinformer.ClusterOf(u.(*unstructured.Unstructured)), false)
		}
	}
	st := wildcard.Resource(workload.SyncTargetsResource)
	c.targets, tinf = clusterinformer.New(clusterinformer.ListWatch(st.List, st.Watch), &unstructured.Unstructured{}, clusterinformer.ClusterIndexers,
		cache.ResourceEventHandlerFuncs{AddFunc: func(o interface{}) { c.taintLater(o); onTarget(o) }, UpdateFunc: func(old, o interface{}) {
			c.taintLater(o)
			if readiness(old) != readiness(o) {
				onTarget(o)
			}
		}, DeleteFunc: onTarget})
	c.informers = []cache.Controller{pinf, namespaces.Synced(), tinf}
	var objectInformers []cache.Controller
	c.objects, objectInformers = newObjectInformers(wildcardMeta, local, c.onObject)
	c.informers = append(c.informers, objectInformers...)
	return c, nil
}

func unwrap(obj interface{}) interface{} {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// readiness summarizes what of a SyncTarget matters to assignment.
func readiness(obj interface{}) string {
	t, err := decodeTarget(obj.(*unstructured.Unstructured))
	if err != nil {
		return ""
	}
	cpu := t.Status.Allocatable[corev1.ResourceCPU]
	taints, _ := json.Marshal(t.Spec.Taints)
	// What a locationExpression can read (labels, reported capacity,
	// version, nodes, condition statuses; not heartbeat times).
	input, _ := json.Marshal(placementexpr.FromSyncTarget(t))
	return fmt.Sprintf("%v/%v/%v/%v/%d/%s/%s", usable(t), t.Spec.Unschedulable, t.Spec.Drain, t.Labels, cpu.MilliValue(), taints, input)
}

// hasPlacements reports whether a cluster has Placements.
func (c *Controller) hasPlacements(cluster logicalcluster.Name) bool {
	pls, _ := c.placements.ByIndex(clusterinformer.ByCluster, string(cluster))
	return len(pls) > 0
}

// carriesAssignment reports whether a namespace carries what the controller
// writes on an assigned one (state labels, target and policy annotations).
func carriesAssignment(m metav1.Object) bool {
	for k := range m.GetLabels() {
		if strings.HasPrefix(k, workload.StateLabelPrefix) {
			return true
		}
	}
	a := m.GetAnnotations()
	_, targets := a[workload.AssignedTargetAnnotation]
	_, pol := a[workload.NamespacePolicyAnnotation]
	return targets || pol
}

// enqueueCluster looks again at every namespace and Placement of a
// cluster: at the Placements' status at once, or in a moment
// (enqueuePlacements).
func (c *Controller) enqueueCluster(cluster logicalcluster.Name, statusNow bool) {
	nss, _ := c.namespaces.ByIndex(clusterinformer.ByCluster, string(cluster))
	for _, ns := range nss {
		c.queue.Add("ns:" + clusterinformer.Key(cluster, "", ns.(*corev1.Namespace).Name))
	}
	if !statusNow {
		c.enqueuePlacements(cluster)
		return
	}
	pls, _ := c.placements.ByIndex(clusterinformer.ByCluster, string(cluster))
	for _, p := range pls {
		c.queue.Add("pl:" + clusterinformer.Key(cluster, "", p.(*unstructured.Unstructured).GetName()))
	}
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.sharedNamespaces.AddEventHandlerUntil(ctx, c.onNamespace)
	go c.writeDrains(ctx)
	worker.Run(ctx, name, c.queue, workers, c.informers, func(ctx context.Context, key string) (time.Duration, error) {
		kind, k, _ := strings.Cut(key, ":")
		cluster, _, objName, err := clusterinformer.SplitKey(k)
		if err != nil {
			return 0, nil
		}
		switch kind {
		case "pl":
			return 0, c.placementStatus(ctx, cluster, objName)
		case "st":
			return 0, c.reconcileTaints(ctx, cluster, objName)
		}
		return c.namespace(ctx, cluster, objName)
	})
}

// selecting returns the cluster's Placements that select a namespace,
// by name.
func (c *Controller) selecting(cluster logicalcluster.Name, ns *corev1.Namespace) []*workload.Placement {
	objs, _ := c.placements.ByIndex(clusterinformer.ByCluster, string(cluster))
	var out []*workload.Placement
	for _, o := range objs {
		if p, err := placementadmission.Decode(o.(*unstructured.Unstructured)); err == nil && placementadmission.Selects(p, ns.Labels) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// choose picks the namespace's targets (in name order) under its first
// selecting Placement: the current ones while the Placement still selects
// them and tolerates their NoExecute taints (a NotReady target has one,
// tolerated for the eviction delay by default), then usable ones whose
// NoSchedule and NoExecute taints it tolerates up to the Placement's
// number (at most one per value of its spreadByLabel; those with a
// PreferNoSchedule taint it does not tolerate last), ranked by a hash of
// namespace and target so namespaces spread evenly and stay put. A current
// target whose NoExecute taint is no longer tolerated keeps its place
// until the eviction rate limit lets the target go, then leaves (Ready:
// gracefully, as a drain; NotReady: at once), and stays for good if it is
// the last one and no other target can take its place; the duration says
// when to look again.
func (c *Controller) choose(now time.Time, cluster logicalcluster.Name, ns *corev1.Namespace) (*workload.Placement, []target, []target, time.Duration) {
	pls := c.selecting(cluster, ns)
	if len(pls) == 0 {
		return nil, nil, nil, 0
	}
	p := pls[0]
	rank := func(t target) uint32 {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%s/%s", cluster, ns.Name, t.ref())
		return h.Sum32()
	}
	spread := p.Spec.SpreadByLabel
	fits := func(t target) bool { return spread == "" || t.obj.Labels[spread] != "" }
	isCurrent := func(t target) bool {
		return ns.Labels[workload.StateLabel(string(t.location), t.obj.Name)] == workload.StateSync
	}
	tols := p.Spec.Tolerations
	// frozen are the current targets the Placement suspends: they keep the
	// namespace whatever happens to them (NotReady, tainted, draining, no
	// longer matching), since unassigning would delete what runs there.
	var current, candidates, frozen []target
	avoid := map[string]bool{}
	defaults := map[string]time.Duration{workload.TaintNotReady: c.evictionDelay}
	for _, t := range c.targetsOf(p) {
		if isCurrent(t) && p.Spec.Suspends(t.obj.Name) {
			frozen = append(frozen, t)
			continue
		}
		if !t.matches || !fits(t) {
			continue
		}
		if isCurrent(t) {
			current = append(current, t)
		} else if usable(t.obj) {
			if ok, preferNot := workload.Schedulable(tols, taintsOf(t.obj), string(cluster)); ok {
				// A NoExecute taint whose toleration has ended (counted
				// from its timeAdded) would send the namespace away at
				// once: no candidate (else one that just left comes
				// back, to leave again, over and over).
				if at, _, evicts := workload.EvictionAt(tols, taintsOf(t.obj), string(cluster), defaults); evicts && !at.After(now) {
					continue
				}
				candidates = append(candidates, t)
				avoid[t.ref()] = preferNot
			}
		}
	}
	byRef := func(ts []target) {
		sort.Slice(ts, func(i, j int) bool { return ts[i].ref() < ts[j].ref() })
	}
	if p.Spec.Suspend {
		// The whole Placement is suspended: the assignment stays as it is,
		// nothing is added (a namespace not assigned yet waits).
		byRef(frozen)
		return p, frozen, nil, 0
	}
	sort.SliceStable(candidates, func(i, j int) bool {
		if a, b := avoid[candidates[i].ref()], avoid[candidates[j].ref()]; a != b {
			return b
		}
		return rank(candidates[i]) < rank(candidates[j])
	})
	used := map[string]bool{}
	for _, t := range frozen {
		used[t.obj.Labels[spread]] = true
	}
	var chosen, evicted, leaving []target
	var recheck time.Duration
	later := func(d time.Duration) {
		if d += 100 * time.Millisecond; recheck == 0 || d < recheck {
			recheck = d
		}
	}
	nsKey := clusterinformer.Key(cluster, "", ns.Name)
	for _, t := range current {
		if spread != "" && used[t.obj.Labels[spread]] {
			continue
		}
		if t.obj.Spec.Drain && ready(t.obj) {
			leaving = append(leaving, t)
			continue
		}
		if at, taint, ok := workload.EvictionAt(tols, taintsOf(t.obj), string(cluster), defaults); ok {
			episode := taint.Key
			if taint.TimeAdded != nil {
				episode += "@" + taint.TimeAdded.UTC().Format(time.RFC3339)
			}
			if left := at.Sub(now); left > 0 {
				later(left)
			} else if granted, wait := c.limiter.admit(now, t.ref(), episode, nsKey); !granted {
				klog.V(2).InfoS("eviction waits for the rate limit", "cluster", cluster, "namespace", ns.Name, "syncTarget", t.ref(), "taint", taint.Key, "wait", wait)
				later(wait)
			} else if ready(t.obj) {
				leaving = append(leaving, t)
				continue
			} else {
				evicted = append(evicted, t)
				continue
			}
		}
		chosen = append(chosen, t)
		used[t.obj.Labels[spread]] = true
	}
	// allClusters: every target kept and every usable one (a cordoned or
	// restarting target keeps what it has).
	want := max(p.Spec.Wanted(len(frozen)+len(chosen)+len(candidates)), 1) - len(frozen)
	// More than wanted (the number went down): keep the Ready ones first,
	// then by rank.
	if len(chosen) > max(want, 0) {
		sort.SliceStable(chosen, func(i, j int) bool {
			if ready(chosen[i].obj) != ready(chosen[j].obj) {
				return ready(chosen[i].obj)
			}
			return rank(chosen[i]) < rank(chosen[j])
		})
		chosen = chosen[:max(want, 0)]
	}
	for _, t := range candidates {
		if len(chosen) >= want {
			break
		}
		if spread != "" && used[t.obj.Labels[spread]] {
			continue
		}
		chosen = append(chosen, t)
		used[t.obj.Labels[spread]] = true
	}
	// A draining target with no replacement stays: a drain never leaves a
	// namespace nowhere. Nor does a dead target that nothing replaced and
	// that was the only one: somewhere to come back to beats nowhere.
	if len(chosen)+len(frozen) == 0 {
		if len(leaving) > 0 {
			chosen, leaving = leaving, nil
		} else if len(evicted) > 0 {
			chosen = evicted[:1]
		}
		for i := range chosen {
			chosen[i].stayed = true
		}
	}
	chosen = append(chosen, frozen...)
	byRef(chosen)
	byRef(leaving)
	return p, chosen, leaving, recheck
}

// replacementsReady reports whether the targets of pol that are not
// leaving run every Deployment of the namespace: each one's copy has
// observed the Deployment's generation and has its share updated and
// available (from the status each syncer reports in its annotation).
func (c *Controller) replacementsReady(ctx context.Context, cluster logicalcluster.Name, namespace string, pol workload.NamespacePolicy) (bool, string, error) {
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return false, "", err
	}
	list, err := d.Resource(deploymentsResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "", err
	}
	for _, dep := range list.Items {
		for key, tp := range pol.Targets {
			if tp.Leaving {
				continue
			}
			share := int64(pol.ShareOf(&dep, key))
			_, status, err := workload.DeploymentShare(dep.GetAnnotations()[workload.StatusAnnotationPrefix+key])
			if err != nil {
				return false, fmt.Sprintf("%s has no status from %s yet", dep.GetName(), tp.Name), nil
			}
			if status.ObservedGeneration < dep.GetGeneration() || int64(status.UpdatedReplicas) < share || int64(status.AvailableReplicas) < share {
				return false, fmt.Sprintf("%s has %d of %d available on %s", dep.GetName(), status.AvailableReplicas, share, tp.Name), nil
			}
		}
	}
	return true, "", nil
}

// rebalancingFrom returns the divisions a Divide namespace's new policy is
// rebalanced from (NamespacePolicy.Previous): that of its policy before the
// change, after those of an unfinished rebalancing; nil when there was no
// division before or it did not change. At most maxPrevious are kept (the
// oldest go: a namespace whose division changes that often has shares in
// flux anyway).
func rebalancingFrom(old, next *workload.NamespacePolicy) []map[string]int64 {
	if old == nil || old.Mode != workload.ModeDivide || next.Mode != workload.ModeDivide || next.Overflow() {
		// An overflow division has no static weights to keep: each
		// target's capacity decides (targets keep their own replicas as
		// room, so shares move only as capacity does).
		return nil
	}
	last := old.Weights()
	if len(old.Previous) == 0 && (len(last) == 0 || maps.Equal(last, next.Weights())) {
		return nil
	}
	from := slices.Clone(old.Previous)
	if len(last) > 0 && !slices.ContainsFunc(from, func(w map[string]int64) bool { return maps.Equal(w, last) }) {
		from = append(from, last)
	}
	if len(from) > maxPrevious {
		from = from[len(from)-maxPrevious:]
	}
	return from
}

const maxPrevious = 4

var deploymentsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// policy is what the syncers of a namespace's targets need to know of its
// Placement (workload.NamespacePolicyAnnotation): the mode, each target's
// weight and overrides, the minimum share.
func policy(p *workload.Placement, chosen, leaving []target) workload.NamespacePolicy {
	out := workload.NamespacePolicy{Mode: p.Spec.Mode, Targets: map[string]workload.TargetPolicy{}, MinReplicas: p.Spec.MinReplicasPerCluster}
	if p.Spec.ConflictResolution == workload.ConflictAdopt {
		out.ConflictResolution = workload.ConflictAdopt
	}
	if out.Mode == "" {
		out.Mode = workload.ModeDuplicate
	}
	out.Rollout = p.Spec.Rollout.DeepCopy()
	for _, t := range chosen {
		tp := workload.TargetPolicy{Name: t.ref(), Weight: 1, Suspended: p.Spec.Suspends(t.obj.Name)}
		for _, w := range p.Spec.Weights {
			if workload.MatchesLabels(w.Selector, t.obj.Labels) {
				tp.Weight = int64(w.Weight)
				break
			}
		}
		if p.Spec.WeightsFrom == workload.WeightsCapacity {
			cpu := t.obj.Status.Allocatable[corev1.ResourceCPU]
			tp.Weight *= cpu.MilliValue()
		}
		for _, o := range p.Spec.Overrides {
			if workload.MatchesLabels(o.Selector, t.obj.Labels) {
				tp.Overrides = append(tp.Overrides, o)
			}
		}
		out.Targets[workload.TargetKey(string(t.location), t.obj.Name)] = tp
	}
	for _, t := range leaving {
		out.Targets[workload.TargetKey(string(t.location), t.obj.Name)] = workload.TargetPolicy{Name: t.ref(), Leaving: true}
	}
	groupPolicy(p, chosen, &out)
	return out
}

func ready(t *workload.SyncTarget) bool {
	return meta.IsStatusConditionTrue(t.Status.Conditions, workload.ConditionReady)
}

// notReadySince is when the target stopped being Ready.
func notReadySince(t *workload.SyncTarget) time.Time {
	if c := meta.FindStatusCondition(t.Status.Conditions, workload.ConditionReady); c != nil {
		return c.LastTransitionTime.Time
	}
	return t.CreationTimestamp.Time
}

// namespace brings one namespace's assignment, and its objects, up to date.
func (c *Controller) namespace(ctx context.Context, cluster logicalcluster.Name, nsName string) (time.Duration, error) {
	obj, ok, _ := c.namespaces.GetByKey(clusterinformer.Key(cluster, "", nsName))
	if !ok {
		c.drains.set(clusterinformer.Key(cluster, "", nsName), nil)
		return 0, nil
	}
	ns := obj.(*corev1.Namespace).DeepCopy()
	if ns.DeletionTimestamp != nil {
		c.drains.set(clusterinformer.Key(cluster, "", nsName), nil)
		return 0, nil
	}
	p, chosen, leaving, recheck := c.choose(time.Now(), cluster, ns)
	assigned := len(chosen) > 0
	var pol workload.NamespacePolicy
	if assigned {
		pol = policy(p, chosen, leaving)
		old, _ := workload.ParsePolicy(ns.Annotations)
		pol.Previous = rebalancingFrom(old, &pol)
	}
	var waitingFor string
	if len(leaving) > 0 || pol.Previous != nil {
		// Draining or rebalancing: the leaving targets go, and the shares
		// that shrink shrink, once the others run their new shares.
		done, why, err := c.replacementsReady(ctx, cluster, ns.Name, pol)
		if err != nil {
			return 0, err
		}
		if done {
			leaving = nil
			pol = policy(p, chosen, nil)
		} else {
			waitingFor = why
			klog.V(2).InfoS("draining or rebalancing: waiting for the new shares", "cluster", cluster, "namespace", ns.Name, "why", why)
			if recheck == 0 || recheck > afterChange {
				recheck = afterChange
			}
		}
	}
	c.recordDrain(cluster, ns.Name, p, chosen, leaving, waitingFor)
	all := append(append([]target{}, chosen...), leaving...)
	want := map[string]bool{}
	var refs []string
	for _, t := range all {
		want[workload.StateLabel(string(t.location), t.obj.Name)] = true
		refs = append(refs, t.ref())
	}
	sort.Strings(refs)
	changed := false
	for k := range ns.Labels {
		if strings.HasPrefix(k, workload.StateLabelPrefix) && !want[k] {
			delete(ns.Labels, k)
			changed = true
		}
	}
	for k := range want {
		if ns.Labels[k] != workload.StateSync {
			if ns.Labels == nil {
				ns.Labels = map[string]string{}
			}
			ns.Labels[k] = workload.StateSync
			changed = true
		}
	}
	wantAnn := map[string]string{workload.AssignedTargetAnnotation: strings.Join(refs, ","), workload.NamespacePolicyAnnotation: ""}
	if assigned {
		raw, err := json.Marshal(pol)
		if err != nil {
			return 0, err
		}
		wantAnn[workload.NamespacePolicyAnnotation] = string(raw)
	}
	for k, v := range wantAnn {
		if have, ok := ns.Annotations[k]; v == "" && ok {
			delete(ns.Annotations, k)
			changed = true
		} else if v != "" && have != v {
			if ns.Annotations == nil {
				ns.Annotations = map[string]string{}
			}
			ns.Annotations[k] = v
			changed = true
		}
	}
	if !assigned && !changed {
		// Never assigned, or cleaned up already: no object carries labels.
		return 0, nil
	}
	// Objects first, the namespace last: should labelling fail half-way,
	// the namespace still differs from what is wanted, and the retry
	// finishes the job.
	listed, err := c.labelObjects(ctx, cluster, ns)
	if err != nil {
		return 0, err
	}
	if changed {
		core, err := c.clients.Core(cluster)
		if err != nil {
			return 0, err
		}
		if _, err = core.Namespaces().Update(ctx, ns, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return 0, err
		}
		// Objects of negotiated resources created between the list above
		// and the moment admission sees the new labels got none: look
		// again shortly. (Those of built-in resources queue the namespace
		// when the cache hears of them: onObject.)
		if listed && (recheck == 0 || recheck > afterChange) {
			recheck = afterChange
		}
	}
	if recheck > 0 {
		return recheck, nil
	}
	if assigned {
		return resync, nil
	}
	return 0, nil
}

// enqueuePlacements looks again at the status of a cluster's Placements
// after a change of its namespaces, in a moment (statusDelay): the
// namespaces they count change in bursts (a new Placement assigns all of
// them, a failover moves all of them), and one status write after the
// burst replaces one for each namespace. (A change of a Placement
// updates its status at once: enqueueCluster.)
func (c *Controller) enqueuePlacements(cluster logicalcluster.Name) {
	pls, _ := c.placements.ByIndex(clusterinformer.ByCluster, string(cluster))
	for _, p := range pls {
		c.queue.AddAfter("pl:"+clusterinformer.Key(cluster, "", p.(*unstructured.Unstructured).GetName()), statusDelay)
	}
}

// labelObjects gives every object of a synced resource in the namespace
// exactly the namespace's assignment labels, and the finalizers of those
// targets; labels and finalizers of targets no longer assigned go (their
// syncers remove the downstream copies that left their view). Objects of
// the built-in synced resources are read from the controller's caches
// (placement_objects.go); those of negotiated resources are listed. It
// reports whether it listed any (their objects created meanwhile are
// found by a look again shortly, not by a watch).
func (c *Controller) labelObjects(ctx context.Context, cluster logicalcluster.Name, ns *corev1.Namespace) (bool, error) {
	if err := c.labelCached(ctx, cluster, ns); err != nil {
		return false, err
	}
	if c.negotiated == nil {
		return false, nil
	}
	resources := c.negotiated.Resources(cluster)
	if len(resources) == 0 {
		return false, nil
	}
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return false, err
	}
	for _, gvr := range resources {
		list, err := d.Resource(gvr).Namespace(ns.Name).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return true, fmt.Errorf("listing %s in %s|%s: %v", gvr.Resource, cluster, ns.Name, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			// A projection (a Pod the physical cluster runs) is never
			// assigned: it is what runs, not what to run.
			if placementadmission.BuiltIn(gvr.GroupResource(), o.GetName()) || placementadmission.Projected(o) || !reconcileAssignment(o, ns) {
				continue
			}
			if _, err := d.Resource(gvr).Namespace(ns.Name).Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsNotFound(err) {
				return true, err
			}
		}
	}
	return true, nil
}

// reconcileAssignment makes an object's assignment labels and finalizers
// those of its namespace; it reports whether anything changed.
func reconcileAssignment(o *unstructured.Unstructured, ns *corev1.Namespace) bool {
	changed := false
	l := o.GetLabels()
	fins := o.GetFinalizers()
	for k := range l {
		key, ok := strings.CutPrefix(k, workload.StateLabelPrefix)
		if !ok || ns.Labels[k] == workload.StateSync {
			continue
		}
		delete(l, k)
		fins = slices.DeleteFunc(fins, func(f string) bool { return f == workload.FinalizerPrefix+key })
		changed = true
	}
	// Per-target status annotations go with their target, and all of them
	// once one target is left (it writes the status itself): a stale one
	// would count again when a second target comes.
	targets := 0
	for k, v := range ns.Labels {
		if strings.HasPrefix(k, workload.StateLabelPrefix) && v == workload.StateSync {
			targets++
		}
	}
	ann := o.GetAnnotations()
	for k := range ann {
		if key, ok := strings.CutPrefix(k, workload.StatusAnnotationPrefix); ok && (targets < 2 || ns.Labels[workload.StateLabelPrefix+key] != workload.StateSync) {
			delete(ann, k)
			changed = true
		}
	}
	if changed {
		o.SetLabels(l)
		o.SetFinalizers(fins)
		o.SetAnnotations(ann)
	}
	if o.GetDeletionTimestamp() == nil && placementadmission.AddAssignment(o, ns) {
		changed = true
	}
	return changed
}
