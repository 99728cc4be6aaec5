package resourcequota

import (
	"context"
	"fmt"
	"strings"
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

// RecountAfterCharge is how soon after admission charged a quota its
// usage is counted again: a create charged and then not stored (refused by
// a later admission step, failed in the datastore) is refunded then, not
// only at the next Resync. Charges in the meantime share the one recount.
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
	base  []quota.Evaluator
}

func newController(st *state) (*Controller, error) {
	base, err := evaluators(&listers{clients: st.clients})
	if err != nil {
		return nil, err
	}
	return &Controller{
		state: st,
		queue: worker.NewQueue[string](name),
		base:  base,
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
	c.queue.AddAfter(key, RecountAfterCharge)
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
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{informer}, func(ctx context.Context, k string) (time.Duration, error) {
		found, err := c.sync(ctx, k)
		if err != nil || !found {
			return 0, err
		}
		return Resync, nil
	})
}

// sync counts one quota's usage in its cluster and namespace and writes
// status.hard (= spec.hard) and status.used when they differ.
func (c *Controller) sync(ctx context.Context, k string) (found bool, err error) {
	obj, ok, err := c.state.indexer.GetByKey(k)
	if err != nil || !ok {
		return false, err
	}
	q := obj.(*corev1.ResourceQuota)
	cluster := clusterinformer.ClusterOf(q)
	evals, err := c.countEvaluators(ctx, q)
	if err != nil {
		return true, err
	}
	used, err := quota.CalculateUsage(key(cluster, q.Namespace), q.Spec.Scopes, q.Spec.Hard, generic.NewRegistry(evals), q.Spec.ScopeSelector)
	if err != nil {
		return true, err
	}
	if quota.Equals(q.Status.Hard, q.Spec.Hard) && quota.Equals(q.Status.Used, used) {
		return true, nil
	}
	next := q.DeepCopy()
	next.Status.Hard, next.Status.Used = q.Spec.Hard, used
	core, err := c.state.clients.Core(cluster)
	if err != nil {
		return true, err
	}
	// With the resourceVersion read before the count: an admission that
	// charged the quota since makes this a conflict, and the count runs
	// again.
	_, err = core.ResourceQuotas(q.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	return true, err
}

// countEvaluators are the base evaluators and an object count evaluator
// for every count/<resource>.<group> of the quota that none of them
// covers, listing the version its cluster prefers.
func (c *Controller) countEvaluators(ctx context.Context, q *corev1.ResourceQuota) ([]quota.Evaluator, error) {
	out := append([]quota.Evaluator{}, c.base...)
	covered := map[schema.GroupResource]bool{}
	for _, e := range c.base {
		covered[e.GroupResource()] = true
	}
	var versions map[string]string
	l := &listers{clients: c.state.clients}
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
