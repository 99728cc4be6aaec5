package sharestatus

import (
	"context"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/localwatch"
)

const name = "kcp-share-status"

// byTarget indexes Deployments by the keys of their assigned targets, and
// SyncTargets by their own key.
const byTarget = "target"

// Controller writes the combined status of Deployments that several
// SyncTargets run, and keeps a dead target's last report from counting
// (honest.go).
type Controller struct {
	queue       workqueue.TypedRateLimitingInterface[string]
	deployments cache.Indexer
	targets     cache.Indexer
	informers   []cache.Controller
	clients     *clusterinformer.Clients
	// namespaces give each Deployment's namespace policy (its Placement's
	// rollout).
	namespaces cache.Indexer

	mu sync.Mutex
	// marked: Deployment key -> target key -> the NotReady episode whose
	// mark has been written (or found) on that Deployment.
	marked map[string]map[string]string
}

// NewController watches Deployments and SyncTargets of all logical
// clusters (one watch each).
func NewController(loopback *rest.Config, local *localwatch.Storages, namespaces *clusterinformer.Namespaces) (*Controller, error) {
	wild, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	wildDyn, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name), clients: clients, marked: map[string]map[string]string{}, namespaces: namespaces.Indexer()}
	enqueue := func(obj interface{}) {
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	indexers := cache.Indexers{byTarget: func(obj interface{}) ([]string, error) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			return AssignedKeys(d), nil
		}
		return nil, nil
	}}
	for k, v := range clusterinformer.ClusterIndexers {
		indexers[k] = v
	}
	lw := local.FromClient(wild.AppsV1().RESTClient(), appsv1.SchemeGroupVersion, "deployments", fields.Everything())
	var deployments cache.Controller
	c.deployments, deployments = clusterinformer.New(lw, &appsv1.Deployment{}, indexers,
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o interface{}) { enqueue(o) }, DeleteFunc: func(o interface{}) {
			if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
				c.forget(tomb.Key)
			} else if key, err := clusterinformer.KeyFunc(o); err == nil {
				c.forget(key)
			}
		}})

	// A target whose Ready changes (dies, or returns) concerns every
	// Deployment assigned to it; heartbeats that change nothing else do not.
	targets := wildDyn.Resource(workload.SyncTargetsResource)
	enqueueAssigned := func(obj interface{}) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		objs, _ := c.deployments.ByIndex(byTarget, targetKeyOf(u))
		for _, o := range objs {
			enqueue(o)
		}
	}
	var synctargets cache.Controller
	c.targets, synctargets = newTargetInformer(targets, enqueueAssigned)
	c.informers = []cache.Controller{deployments, synctargets, namespaces.Synced()}
	return c, nil
}

// newTargetInformer watches SyncTargets (indexed by their key) and calls
// enqueueAssigned for a target that is dead when first seen, and for one
// that dies or returns.
func newTargetInformer(targets dynamic.NamespaceableResourceInterface, enqueueAssigned func(interface{})) (cache.Indexer, cache.Controller) {
	return clusterinformer.New(clusterinformer.ListWatch(targets.List, targets.Watch), &unstructured.Unstructured{},
		cache.Indexers{byTarget: func(obj interface{}) ([]string, error) {
			return []string{targetKeyOf(obj.(*unstructured.Unstructured))}, nil
		}},
		cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj interface{}) {
				if _, dead := deadTarget(obj); dead {
					enqueueAssigned(obj)
				}
			},
			UpdateFunc: func(old, obj interface{}) {
				was, wasDead := deadTarget(old)
				is, isDead := deadTarget(obj)
				if wasDead != isDead || was != is {
					enqueueAssigned(obj)
				}
			},
		})
}

func targetKeyOf(u *unstructured.Unstructured) string {
	return workload.TargetKey(string(clusterinformer.ClusterOf(u)), u.GetName())
}

// deadTarget is DeadTargetOf for a SyncTarget from the informer.
func deadTarget(obj interface{}) (DeadTarget, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return DeadTarget{}, false
	}
	var t workload.SyncTarget
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err != nil {
		return DeadTarget{}, false
	}
	return DeadTargetOf(string(clusterinformer.ClusterOf(u)), &t)
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, name, c.queue, workers, c.informers, func(ctx context.Context, key string) (time.Duration, error) {
		return c.sync(ctx, key)
	})
}

func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	obj, ok, _ := c.deployments.GetByKey(key)
	if !ok {
		c.forget(key)
		return 0, nil
	}
	d := obj.(*appsv1.Deployment)
	dead := c.newlyDead(key, d)
	out := d
	if marked := MarkUnreachable(d, dead); marked != nil {
		out = marked
	}
	// A progressive rollout (rollout.go) records where it stands on the
	// Deployment, with the status.
	st, after := RolloutStep(time.Now(), out, c.policy(d), c.targetLabels(AssignedKeys(d)))
	out = withRolloutState(out, st)
	if want, ok := Aggregate(out); ok && !sameStatus(out.Status, want) {
		if out == d {
			out = d.DeepCopy()
		}
		out.Status = want
	}
	if out == d {
		c.remember(key, dead)
		return after, nil
	}
	now := metav1.Now()
	for i := range out.Status.Conditions {
		if out.Status.Conditions[i].LastTransitionTime.IsZero() {
			out.Status.Conditions[i].LastTransitionTime, out.Status.Conditions[i].LastUpdateTime = now, now
		}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(out)
	if err != nil {
		return 0, err
	}
	// Objects from an informer have no kind; the client needs one.
	u["apiVersion"], u["kind"] = "apps/v1", "Deployment"
	cluster := clusterinformer.ClusterOf(d)
	dyn, err := c.clients.Dynamic(cluster)
	if err != nil {
		return 0, err
	}
	_, err = dyn.Resource(appsv1.SchemeGroupVersion.WithResource("deployments")).Namespace(d.Namespace).
		UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: name})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or changed since: its next event brings it back.
		return 0, nil
	}
	if err == nil {
		c.remember(key, dead)
	}
	return after, err
}

// policy is the placement policy of d's namespace (nil when none).
func (c *Controller) policy(d *appsv1.Deployment) *workload.NamespacePolicy {
	obj, ok, _ := c.namespaces.GetByKey(clusterinformer.Key(clusterinformer.ClusterOf(d), "", d.Namespace))
	if !ok {
		return nil
	}
	pol, _ := workload.ParsePolicy(obj.(*corev1.Namespace).Annotations)
	return pol
}

// targetLabels are the labels of the targets of these keys.
func (c *Controller) targetLabels(keys []string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, k := range keys {
		objs, _ := c.targets.ByIndex(byTarget, k)
		for _, o := range objs {
			out[k] = o.(*unstructured.Unstructured).GetLabels()
		}
	}
	return out
}

// newlyDead returns the Deployment's assigned targets that are NotReady
// and whose NotReady episode has not been marked on it yet, and forgets the
// episodes of targets Ready again.
func (c *Controller) newlyDead(key string, d *appsv1.Deployment) map[string]DeadTarget {
	c.mu.Lock()
	defer c.mu.Unlock()
	dead := map[string]DeadTarget{}
	for _, k := range AssignedKeys(d) {
		objs, _ := c.targets.ByIndex(byTarget, k)
		var t DeadTarget
		isDead := false
		for _, o := range objs {
			if t, isDead = deadTarget(o); isDead {
				break
			}
		}
		if !isDead {
			delete(c.marked[key], k)
			continue
		}
		if c.marked[key][k] != t.Episode {
			dead[k] = t
		}
	}
	if len(c.marked[key]) == 0 {
		delete(c.marked, key)
	}
	return dead
}

func (c *Controller) remember(key string, dead map[string]DeadTarget) {
	if len(dead) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.marked[key] == nil {
		c.marked[key] = map[string]string{}
	}
	for k, t := range dead {
		c.marked[key][k] = t.Episode
	}
}

func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.marked, key)
}

// sameStatus compares statuses without the conditions' times.
func sameStatus(a, b appsv1.DeploymentStatus) bool {
	strip := func(s appsv1.DeploymentStatus) appsv1.DeploymentStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastUpdateTime, s.Conditions[i].LastTransitionTime = metav1.Time{}, metav1.Time{}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}
