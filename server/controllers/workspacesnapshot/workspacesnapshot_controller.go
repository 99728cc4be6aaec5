// Package workspacesnapshot takes the snapshots WorkspaceSnapshots ask
// for: a WorkspaceSnapshot in a parent workspace names one of its child
// workspaces and, optionally, an interval and how many to keep; the
// snapshots are stored in the datastore (storage/snapshots) and restored
// by WorkspaceRestores of the same parent. Deleting the WorkspaceSnapshot
// deletes its snapshots (a finalizer holds it until then).
package workspacesnapshot

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/restore"
)

const name = "kcp-workspace-snapshot"

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	queue    workqueue.TypedRateLimitingInterface[string]
	indexer  cache.Indexer
	informer cache.Controller
	r        *reconciler
}

// NewController watches WorkspaceSnapshots of all logical clusters with
// one watch.
func NewController(loopback *rest.Config, source restore.Source) (*Controller, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name)}
	list := wildcard.Resource(tenancy.WorkspaceSnapshotsResource)
	enqueue := func(obj interface{}) {
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	c.indexer, c.informer = clusterinformer.New(clusterinformer.ListWatch(list.List, list.Watch), &unstructured.Unstructured{}, nil,
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj interface{}) { enqueue(obj) }})
	c.r = &reconciler{db: source.DB, dialect: source.Dialect, clients: clients, now: time.Now}
	return c, nil
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{c.informer}, func(ctx context.Context, key string) (time.Duration, error) {
		obj, exists, err := c.indexer.GetByKey(key)
		if err != nil || !exists {
			return 0, nil
		}
		return c.r.reconcile(ctx, obj.(*unstructured.Unstructured).DeepCopy())
	})
}
