// Package workspace creates and deletes logical clusters for Workspace
// objects in every logical cluster with one shared controller (see README.md).
package workspace

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const name = "kcp-workspace"

// Controller is the informer and queue plumbing; the work is in reconciler.
type Controller struct {
	queue    workqueue.TypedRateLimitingInterface[string]
	informer cache.Controller
	indexer  cache.Indexer
	r        *reconciler
	clusters func() []logicalcluster.Name
	// limitsSynced says whether r.limits knows every cluster yet.
	limitsSynced func() bool
	// stored (if set) lists Workspaces straight from the datastore, and
	// watched (if set) watches them there.
	stored  clusterinformer.RangeFunc
	watched clusterinformer.WatchFunc
}

// ReadStored makes the controller list Workspaces straight from the
// datastore with rangeFn (listStored) and, if watchFn is set, watch them
// there (watchStored; otherwise through the API server). At 100,000
// workspaces a list through the API server (decoding, completing and
// encoding every Workspace for the informer to decode again) was seconds
// of every start of the controllers, and a watch through it costs the same
// for every change (a new Workspace is written twice: created, then
// Ready). Call before Run.
func (c *Controller) ReadStored(rangeFn clusterinformer.RangeFunc, watchFn clusterinformer.WatchFunc) {
	c.stored, c.watched = rangeFn, watchFn
}

// orphanSweep is how often the controller looks for logical clusters whose
// Workspace is gone without a delete event it saw (deleted while no replica
// ran this controller).
const orphanSweep = 10 * time.Minute

// NewController builds the controller. serverURL goes into status.URL;
// storage takes the writes of a new workspace's own objects
// (storagewrites.go); deleteClusterData removes every object of a logical
// cluster; clusters lists the existing logical clusters and state tells
// whether the server routes to one and whether it is being deleted (the
// LogicalCluster registry). The controller's list and watch of Workspaces
// also feed the caches of also (the garbage collector's), so that a start
// lists every Workspace once.
func NewController(loopback *rest.Config, serverURL string, storage Storage, deleteClusterData func(context.Context, logicalcluster.Name) (int, error),
	clusters func() []logicalcluster.Name, state func(logicalcluster.Name) (exists, terminating bool),
	limits func(logicalcluster.Name) tenancy.Limits, also ...clusterinformer.Consumer) (*Controller, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	c := &Controller{
		queue:    worker.NewQueue[string](name),
		clusters: clusters,
	}
	ws := wildcard.Resource(tenancy.WorkspacesResource)
	lw := clusterinformer.ListWatch(func(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
		if c.stored != nil {
			return listStored(ctx, c.stored)
		}
		return ws.List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		if c.stored != nil && c.watched != nil {
			return watchStored(ctx, c.watched, o)
		}
		return ws.Watch(ctx, o)
	})
	enqueue := func(obj interface{}) {
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	own := clusterinformer.Consumer{Trim: trimReady, Handler: cache.ResourceEventHandlerDetailedFuncs{
		// A Workspace that is Ready when the controller starts needs a
		// look only if its limits or freeze differ from its
		// LogicalCluster's, which
		// the sweep after the first list checks (sweep): at 100,000
		// workspaces, queueing each one cost start-up work and left the
		// queue's maps that large for good.
		AddFunc: func(obj interface{}, isInInitialList bool) {
			if _, ready := obj.(*readyWorkspace); !ready || !isInInitialList {
				enqueue(obj)
			}
		},
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
		// A Workspace deleted without the controller having deleted its
		// cluster (an operator removed the finalizer) leaves an orphaned
		// cluster behind; after a normal deletion the look finds nothing.
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			enqueue(obj)
		},
	}}
	var caches []cache.Indexer
	caches, c.informer = clusterinformer.NewShared(lw, &unstructured.Unstructured{}, append([]clusterinformer.Consumer{own}, also...)...)
	c.indexer = caches[0]
	clients, err := clientsFor(loopback)
	if err != nil {
		return nil, err
	}
	c.r = &reconciler{
		clients:           clients,
		serverURL:         serverURL,
		deleteClusterData: deleteClusterData,
		limits:            limits,
		storage:           storage,
		clusterState:      state,
	}
	return c, nil
}

// LimitsSynced tells the controller when the limits it was given are known
// for every cluster (the registry has loaded); until then its sweep does
// not compare them.
func (c *Controller) LimitsSynced(synced func() bool) { c.limitsSynced = synced }

// SyncFrozen makes the controller copy every Workspace's spec.frozen to
// its LogicalCluster and report it in a Frozen condition; frozen returns
// the reason the LogicalCluster has now ("" none: the registry's
// FreezeOf(c).Reason). Known for every cluster when LimitsSynced says so.
func (c *Controller) SyncFrozen(frozen func(logicalcluster.Name) string) { c.r.frozen = frozen }

// OwnerBindingServed says that the storage layer serves every workspace's
// owner binding from its LogicalCluster (storage/serveddefaults), so the
// controller does not write it.
func (c *Controller) OwnerBindingServed() { c.r.ownerBindingServed = true }

// Shards makes the controller create and delete the logical clusters of
// Workspaces that name another shard (spec.shard) on that shard.
func (c *Controller) Shards(m *shards.Membership) {
	if m.Sharded() {
		c.r.peers = &peers{m: m}
	}
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go func() {
		if !clusterinformer.WaitForSync(ctx, c.informer.HasSynced) {
			return
		}
		// The first sweep also stands for the Ready Workspaces the first
		// list did not queue: it waits until it can compare their limits.
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
			return c.limitsSynced == nil || c.limitsSynced(), nil
		})
		wait.UntilWithContext(ctx, c.sweep, orphanSweep)
	}()
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{c.informer}, func(ctx context.Context, key string) (time.Duration, error) {
		obj, exists, err := c.indexer.GetByKey(key)
		if err != nil {
			return 0, nil
		}
		cluster, _, name, _ := clusterinformer.SplitKey(key)
		if !exists {
			return c.r.deleteOrphan(ctx, cluster, name)
		}
		if ready, ok := obj.(*readyWorkspace); ok {
			child, err := ready.child()
			if err != nil {
				return 0, nil
			}
			if c.r.remote(ready.shard) {
				return 0, c.r.syncSpecRemote(ctx, child, ready.spec, ready.shard)
			}
			return 0, c.r.syncSpec(ctx, ready.Cluster, ready.Name, child, ready.spec)
		}
		return c.r.reconcile(ctx, cluster, obj.(*unstructured.Unstructured).DeepCopy())
	})
}

// readyWorkspace is what the cache keeps of a Workspace that is Ready, has
// the controller's finalizer and is not being deleted: all the controller
// still does for it is copy spec.limits and spec.frozen to its
// LogicalCluster (and report spec.frozen in its status). A Workspace
// in any other state is kept whole (there are few, and not for long). With
// 100,000 workspaces this is about 2 KiB less per workspace than the
// unstructured object (docs/performance.md).
type readyWorkspace struct {
	clusterinformer.Ref
	spec copied
	// shard is the Workspace's spec.shard.
	shard string
}

// child is the Workspace's logical cluster.
func (w *readyWorkspace) child() (logicalcluster.Name, error) {
	return logicalcluster.Parse(string(w.Cluster.Join(w.Name)))
}

func trimReady(obj interface{}) (interface{}, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetDeletionTimestamp() != nil || !slices.Contains(u.GetFinalizers(), tenancy.WorkspaceFinalizer) {
		return obj, nil
	}
	if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != tenancy.PhaseReady {
		return obj, nil
	}
	return &readyWorkspace{Ref: clusterinformer.RefOf(u), spec: copiedOf(u), shard: shardOf(u)}, nil
}

// sweep queues every Ready Workspace whose limits or freeze differ from
// its LogicalCluster's and every logical cluster without a Workspace in the
// informer (deleteOrphan checks again against the API before it deletes).
func (c *Controller) sweep(context.Context) {
	if c.r.limits != nil && (c.limitsSynced == nil || c.limitsSynced()) {
		for _, obj := range c.indexer.List() {
			ws, ok := obj.(*readyWorkspace)
			if !ok {
				continue
			}
			child, err := ws.child()
			if err == nil && c.r.differs(child, ws.spec) {
				c.queue.Add(clusterinformer.Key(ws.Cluster, "", ws.Name))
			}
		}
	}
	if c.clusters == nil {
		return
	}
	for _, cluster := range c.clusters() {
		parent, ok := cluster.Parent()
		if !ok || cluster == logicalcluster.SystemCRDs {
			continue
		}
		key := clusterinformer.Key(parent, "", cluster.Base())
		if _, exists, err := c.indexer.GetByKey(key); err == nil && !exists {
			c.queue.Add(key)
		}
	}
}
