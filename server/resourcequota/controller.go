package resourcequota

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const name = "kcp-resource-quota"

// Resync is how often every quota's usage is counted again even when
// nothing told the controller it changed (a deletion admitted by another
// replica, an object whose finalizers held its deletion).
const Resync = 5 * time.Minute

// RecountAfterCharge is how long after the last charge admission made to a
// quota its usage is counted again: a create charged and then not stored
// (refused by a later admission step, failed in the datastore) is refunded
// then, not only at the next Resync. A quota being charged is not counted
// until its charges have stopped for this long: a count taken while creates
// are charged but not yet stored would refund them, and once they are
// stored nothing would charge the quota again before the Resync (for that
// long the quota would allow more than its hard limit).
const RecountAfterCharge = 10 * time.Second

// evaluators are upstream's evaluators of pods, services, persistent
// volume claims and the legacy object counts (configmaps, secrets, ...),
// listing through l. Resource claims (DRA) are not served by kcp.
func evaluators(l *listers) ([]quota.Evaluator, error) {
	return core.NewEvaluators(l.forResource, nil, func(gvr schema.GroupVersionResource) bool { return gvr.Group != "resource.k8s.io" })
}

// Controller keeps status.hard and status.used of every ResourceQuota of
// every logical cluster: one queue of quota keys and a few workers for all
// of them, fed by the shared quota informer, by deletions the admission
// plugin lets through, and by a periodic resync.
type Controller struct {
	state *state
	queue workqueue.TypedRateLimitingInterface[string]
	// base lists from the watch cache as it is; consistent from a cache
	// that has caught up with every write stored before the list.
	base, consistent []quota.Evaluator

	mu sync.Mutex
	// lastCharge is when admission last charged a quota, by key, until
	// the quota has been counted after it; waitingSince, when its count
	// was first put off for a charge.
	lastCharge, waitingSince map[string]time.Time
}

func newController(st *state) (*Controller, error) {
	base, err := evaluators(&listers{clients: st.clients})
	if err != nil {
		return nil, err
	}
	consistent, err := evaluators(&listers{clients: st.clients, consistent: true})
	if err != nil {
		return nil, err
	}
	return &Controller{
		state:        st,
		queue:        worker.NewQueue[string](name),
		base:         base,
		consistent:   consistent,
		lastCharge:   map[string]time.Time{},
		waitingSince: map[string]time.Time{},
	}, nil
}

// enqueueNamespace counts the quotas of a cluster and namespace again
// after delay.
func (c *Controller) enqueueNamespace(k string, delay time.Duration) {
	objs, _ := c.state.indexer.ByIndex(clusterinformer.ByClusterNamespace, k)
	for _, o := range objs {
		if qk, err := clusterinformer.KeyFunc(o); err == nil {
			c.queue.AddAfter(qk, delay)
		}
	}
}

// charged schedules the recount of a quota admission charged.
func (c *Controller) charged(key string) {
	c.mu.Lock()
	c.lastCharge[key] = time.Now()
	c.mu.Unlock()
	c.queue.AddAfter(key, RecountAfterCharge)
}

// MaxCountDelay bounds how long charges that do not stop put a count
// off: a namespace that is created into steadily (a CronJob's pods) must
// still get its deletions refunded. A count then may refund creates in
// flight at that moment; the count after it, RecountAfterCharge later,
// charges them again.
const MaxCountDelay = time.Minute

// untilQuiet is how long the quota of key must still wait before it is
// counted: until RecountAfterCharge has passed since its last charge, or
// MaxCountDelay since the count was first put off.
func (c *Controller) untilQuiet(key string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.lastCharge[key]
	if !ok {
		return 0
	}
	now := time.Now()
	if wait := RecountAfterCharge - now.Sub(last); wait > 0 {
		since, waiting := c.waitingSince[key]
		if !waiting {
			since = now
			c.waitingSince[key] = now
		}
		if left := MaxCountDelay - now.Sub(since); left > 0 {
			return min(wait, left)
		}
	}
	delete(c.lastCharge, key)
	delete(c.waitingSince, key)
	return 0
}

func (c *Controller) handler() cache.ResourceEventHandler {
	add := func(obj interface{}) {
		if k, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: add,
		UpdateFunc: func(old, obj interface{}) {
			o, n := old.(*corev1.ResourceQuota), obj.(*corev1.ResourceQuota)
			// Status writes (the admission plugin's increments, ours) need
			// no recount; a spec change does.
			if !apiequality.Semantic.DeepEqual(o.Spec, n.Spec) || !quota.Equals(n.Spec.Hard, n.Status.Hard) {
				add(obj)
			}
		},
	}
}

// Run runs the quota informer and workers until ctx ends.
func (c *Controller) Run(ctx context.Context, informer cache.Controller, workers int) {
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{informer}, c.process)
}

func (c *Controller) process(ctx context.Context, k string) (time.Duration, error) {
	if wait := c.untilQuiet(k); wait > 0 {
		return wait, nil
	}
	found, lowered, err := c.sync(ctx, k)
	switch {
	case err != nil || !found:
		return 0, err
	case lowered:
		// A create charged before the count and stored after it was
		// refunded: count once more when it has surely landed.
		return RecountAfterCharge, nil
	}
	return Resync, nil
}

// sync counts one quota's usage in its cluster and namespace and writes
// status.hard (= spec.hard) and status.used when they differ. A count
// that would lower a usage is taken again from a cache that has every
// stored write (the watch cache as it is may lag behind the datastore);
// lowered says such a count was written.
func (c *Controller) sync(ctx context.Context, k string) (found, lowered bool, err error) {
	obj, ok, err := c.state.indexer.GetByKey(k)
	if err != nil || !ok {
		return false, false, err
	}
	q := obj.(*corev1.ResourceQuota)
	used, err := c.count(ctx, q, false)
	if err != nil {
		return true, false, err
	}
	if quota.Equals(q.Status.Hard, q.Spec.Hard) && quota.Equals(q.Status.Used, used) {
		return true, false, nil
	}
	if lowers(q.Status.Used, used) {
		if used, err = c.count(ctx, q, true); err != nil {
			return true, false, err
		}
		lowered = lowers(q.Status.Used, used)
	}
	cluster := clusterinformer.ClusterOf(q)
	next := q.DeepCopy()
	next.Status.Hard, next.Status.Used = q.Spec.Hard, used
	core, err := c.state.clients.Core(cluster)
	if err != nil {
		return true, false, err
	}
	// With the resourceVersion read before the count: an admission that
	// charged the quota since makes this a conflict, and the count runs
	// again.
	if _, err = core.ResourceQuotas(q.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return true, false, err
	}
	return true, lowered, nil
}

// count is the usage of q in its cluster and namespace, listed from the
// watch cache as it is or, consistent, once it has every stored write.
func (c *Controller) count(ctx context.Context, q *corev1.ResourceQuota, consistent bool) (corev1.ResourceList, error) {
	evals, err := c.countEvaluators(ctx, q, consistent)
	if err != nil {
		return nil, err
	}
	return quota.CalculateUsage(key(clusterinformer.ClusterOf(q), q.Namespace), q.Spec.Scopes, q.Spec.Hard, generic.NewRegistry(evals), q.Spec.ScopeSelector)
}

// lowers: next has less of some resource than was.
func lowers(was, next corev1.ResourceList) bool {
	for name, v := range was {
		if n, ok := next[name]; ok && n.Cmp(v) < 0 {
			return true
		}
	}
	return false
}

// countEvaluators are the base evaluators and an object count evaluator
// for every count/<resource>.<group> of the quota that none of them
// covers, listing the version its cluster prefers.
func (c *Controller) countEvaluators(ctx context.Context, q *corev1.ResourceQuota, consistent bool) ([]quota.Evaluator, error) {
	base := c.base
	if consistent {
		base = c.consistent
	}
	out := append([]quota.Evaluator{}, base...)
	covered := map[schema.GroupResource]bool{}
	for _, e := range base {
		covered[e.GroupResource()] = true
	}
	var versions map[string]string
	l := &listers{clients: c.state.clients, consistent: consistent}
	for name := range q.Spec.Hard {
		rest, ok := strings.CutPrefix(string(name), "count/")
		if !ok {
			continue
		}
		gr := schema.ParseGroupResource(rest)
		if covered[gr] {
			continue
		}
		covered[gr] = true
		version := "v1"
		if gr.Group != "" {
			if versions == nil {
				var err error
				if versions, err = c.preferredVersions(clusterinformer.ClusterOf(q)); err != nil {
					return nil, err
				}
			}
			if version = versions[gr.Group]; version == "" {
				continue // not served in this cluster: nothing to count
			}
		}
		out = append(out, generic.NewObjectCountEvaluator(gr, generic.ListResourceUsingListerFunc(l.forResource, gr.WithVersion(version)), ""))
	}
	return out, nil
}

func (c *Controller) preferredVersions(cluster logicalcluster.Name) (map[string]string, error) {
	d, err := c.state.clients.Discovery(cluster)
	if err != nil {
		return nil, err
	}
	groups, err := d.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("discovery: %v", err)
	}
	out := map[string]string{}
	for _, g := range groups.Groups {
		out[g.Name] = g.PreferredVersion.Version
	}
	return out, nil
}
