package sharestatus

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
)

// Honest status of the kinds whose status one target reports: a
// StatefulSet and a Job run on one target (the namespace's first, by key),
// and so does a DaemonSet whose namespace has one target (on several, kcp writes
// the sum of the targets' reports: daemonset_aggregate.go). When that target's
// heartbeat stops, its last report no longer counts: kcp writes nothing
// ready or available and the condition Available=False with the reason
// SyncTargetNotReady naming the target, once per NotReady episode (as for
// Deployments, honest.go). When the target's syncer reports again, it
// writes the physical cluster's status over kcp's.

const oneTargetName = "kcp-one-target-status"

// oneTargetKinds are the resources OneTargetController watches, with how
// a dead target's last report stops counting: the status fields that
// count ready or available pods are zeroed. It returns false when the
// report stays true whatever the target does now (a finished Job).
var oneTargetKinds = map[schema.GroupVersionResource]func(status map[string]interface{}, spec map[string]interface{}) bool{
	{Group: "apps", Version: "v1", Resource: "statefulsets"}: func(st, spec map[string]interface{}) bool {
		st["readyReplicas"], st["availableReplicas"], st["currentReplicas"] = int64(0), int64(0), int64(0)
		return true
	},
	{Group: "apps", Version: "v1", Resource: "daemonsets"}: func(st, _ map[string]interface{}) bool {
		desired, _, _ := unstructured.NestedInt64(st, "desiredNumberScheduled")
		st["numberReady"], st["numberAvailable"], st["numberUnavailable"] = int64(0), int64(0), desired
		return true
	},
	// A Job's pods on a dead target are not ready as far as anyone knows;
	// they stay active (as upstream counts pods on an unreachable node
	// until they are gone), and a Job that completed or failed stays so.
	{Group: "batch", Version: "v1", Resource: "jobs"}: func(st, _ map[string]interface{}) bool {
		conds, _, _ := unstructured.NestedSlice(st, "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]interface{}); ok && (m["type"] == "Complete" || m["type"] == "Failed") && m["status"] == "True" {
				return false
			}
		}
		st["ready"] = int64(0)
		return true
	},
}

// oneTargetKindNames are their kinds.
var oneTargetKindNames = map[string]string{"statefulsets": "StatefulSet", "daemonsets": "DaemonSet", "jobs": "Job"}

// OneTargetController keeps a dead target's last report of a StatefulSet,
// DaemonSet or Job from counting.
type OneTargetController struct {
	queue     workqueue.TypedRateLimitingInterface[string]
	objects   map[schema.GroupVersionResource]cache.Indexer
	targets   cache.Indexer
	informers []cache.Controller
	clients   *clusterinformer.Clients

	mu sync.Mutex
	// marked: queue key -> the NotReady episode whose mark was written.
	marked map[string]string
}

// NewOneTargetController watches StatefulSets, DaemonSets, Jobs and SyncTargets
// of all logical clusters (one watch each).
func NewOneTargetController(loopback *rest.Config) (*OneTargetController, error) {
	wild, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &OneTargetController{queue: worker.NewQueue[string](oneTargetName), clients: clients,
		objects: map[schema.GroupVersionResource]cache.Indexer{}, marked: map[string]string{}}
	indexers := cache.Indexers{byTarget: func(obj interface{}) ([]string, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return assignedKeys(u.GetLabels()), nil
		}
		return nil, nil
	}}
	for k, v := range clusterinformer.ClusterIndexers {
		indexers[k] = v
	}
	for gvr := range oneTargetKinds {
		gvr := gvr
		enqueue := func(obj interface{}) {
			if key, err := clusterinformer.KeyFunc(obj); err == nil {
				c.queue.Add(gvr.Resource + "|" + key)
			}
		}
		r := wild.Resource(gvr)
		idx, inf := clusterinformer.New(clusterinformer.ListWatch(r.List, r.Watch), &unstructured.Unstructured{}, indexers,
			cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o interface{}) { enqueue(o) }, DeleteFunc: enqueue})
		c.objects[gvr], c.informers = idx, append(c.informers, inf)
	}
	enqueueAssigned := func(obj interface{}) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		for gvr, idx := range c.objects {
			objs, _ := idx.ByIndex(byTarget, targetKeyOf(u))
			for _, o := range objs {
				if key, err := clusterinformer.KeyFunc(o); err == nil {
					c.queue.Add(gvr.Resource + "|" + key)
				}
			}
		}
	}
	var synctargets cache.Controller
	c.targets, synctargets = newTargetInformer(wild.Resource(workload.SyncTargetsResource), enqueueAssigned)
	c.informers = append(c.informers, synctargets)
	return c, nil
}

// assignedKeys are the keys of the targets an object is assigned to, in
// order.
func assignedKeys(labels map[string]string) []string {
	var keys []string
	for k, v := range labels {
		if key, ok := strings.CutPrefix(k, workload.StateLabelPrefix); ok && v == workload.StateSync {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys
}

// Run processes the queue until ctx ends.
func (c *OneTargetController) Run(ctx context.Context, workers int) {
	worker.Run(ctx, oneTargetName, c.queue, workers, c.informers, func(ctx context.Context, key string) (time.Duration, error) {
		return 0, c.sync(ctx, key)
	})
}

func (c *OneTargetController) sync(ctx context.Context, key string) error {
	resource, objKey, _ := strings.Cut(key, "|")
	var gvr schema.GroupVersionResource
	for r := range oneTargetKinds {
		if r.Resource == resource {
			gvr = r
		}
	}
	idx, ok := c.objects[gvr]
	if !ok {
		return nil
	}
	obj, exists, _ := idx.GetByKey(objKey)
	if !exists {
		c.setMark(key, "")
		return nil
	}
	u := obj.(*unstructured.Unstructured)
	keys := assignedKeys(u.GetLabels())
	if len(keys) == 0 {
		c.setMark(key, "")
		return nil
	}
	if gvr.Resource == "daemonsets" && len(keys) > 1 {
		c.setMark(key, "")
		return c.sumDaemonSet(ctx, gvr, u, keys)
	}
	var dead DeadTarget
	isDead := false
	objs, _ := c.targets.ByIndex(byTarget, keys[0])
	for _, o := range objs {
		if dead, isDead = deadTarget(o); isDead {
			break
		}
	}
	if !isDead {
		c.setMark(key, "")
		return nil
	}
	if c.mark(key) == dead.Episode {
		return nil // marked once this episode; what the syncer writes since is fresh
	}
	out := u.DeepCopy()
	st, _, _ := unstructured.NestedMap(out.Object, "status")
	if st == nil {
		st = map[string]interface{}{}
	}
	spec, _, _ := unstructured.NestedMap(out.Object, "spec")
	if !oneTargetKinds[gvr](st, spec) {
		c.setMark(key, dead.Episode)
		return nil
	}
	st["conditions"] = unavailableCondition(st["conditions"], dead.Why)
	if err := unstructured.SetNestedMap(out.Object, st, "status"); err != nil {
		return err
	}
	out.SetAPIVersion(gvr.GroupVersion().String())
	out.SetKind(oneTargetKindNames[gvr.Resource])
	dyn, err := c.clients.Dynamic(clusterinformer.ClusterOf(u))
	if err != nil {
		return err
	}
	_, err = dyn.Resource(gvr).Namespace(u.GetNamespace()).UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: oneTargetName})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or changed since: its next event brings it back
	}
	if err == nil {
		c.setMark(key, dead.Episode)
	}
	return err
}

// sumDaemonSet writes the summed status of a DaemonSet several targets run
// (daemonset_aggregate.go).
func (c *OneTargetController) sumDaemonSet(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, keys []string) error {
	dead := map[string]DeadTarget{}
	for _, k := range keys {
		objs, _ := c.targets.ByIndex(byTarget, k)
		for _, o := range objs {
			if d, isDead := deadTarget(o); isDead {
				dead[k] = d
			}
		}
	}
	want, ok := AggregateDaemonSet(u, dead)
	if !ok {
		return nil
	}
	have, _, _ := unstructured.NestedMap(u.Object, "status")
	if sameIgnoringTimes(have, want) {
		return nil
	}
	now := metav1.Now().UTC().Format(time.RFC3339)
	if conds, ok := want["conditions"].([]interface{}); ok {
		for _, cd := range conds {
			if m, ok := cd.(map[string]interface{}); ok && m["lastTransitionTime"] == nil {
				m["lastTransitionTime"] = now
			}
		}
	}
	out := u.DeepCopy()
	if err := unstructured.SetNestedField(out.Object, jsonRound(want), "status"); err != nil {
		return err
	}
	out.SetAPIVersion(gvr.GroupVersion().String())
	out.SetKind("DaemonSet")
	dyn, err := c.clients.Dynamic(clusterinformer.ClusterOf(u))
	if err != nil {
		return err
	}
	_, err = dyn.Resource(gvr).Namespace(u.GetNamespace()).UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: oneTargetName})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or changed since: its next event brings it back
	}
	return err
}

// sameIgnoringTimes compares two statuses without their conditions'
// transition times.
func sameIgnoringTimes(a, b map[string]interface{}) bool {
	strip := func(m map[string]interface{}) interface{} {
		r := jsonRound(m).(map[string]interface{})
		if conds, ok := r["conditions"].([]interface{}); ok {
			for _, cd := range conds {
				if cm, ok := cd.(map[string]interface{}); ok {
					delete(cm, "lastTransitionTime")
				}
			}
		}
		return r
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

// jsonRound gives a value the types JSON decoding gives (int64 -> float64).
func jsonRound(v interface{}) interface{} {
	b, _ := json.Marshal(v)
	var out interface{}
	_ = json.Unmarshal(b, &out)
	if out == nil {
		return map[string]interface{}{}
	}
	return out
}

// unavailableCondition sets Available=False (SyncTargetNotReady, why) in a
// status's conditions, keeping the others.
func unavailableCondition(conds interface{}, why string) []interface{} {
	now := metav1.Now().UTC().Format(time.RFC3339)
	cond := map[string]interface{}{"type": "Available", "status": "False", "reason": workload.ReasonSyncTargetNotReady, "message": why, "lastTransitionTime": now}
	list, _ := conds.([]interface{})
	out := make([]interface{}, 0, len(list)+1)
	for _, c := range list {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == "Available" {
			continue
		}
		out = append(out, c)
	}
	return append(out, cond)
}

func (c *OneTargetController) mark(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.marked[key]
}

func (c *OneTargetController) setMark(key, episode string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if episode == "" {
		delete(c.marked, key)
	} else {
		c.marked[key] = episode
	}
}
