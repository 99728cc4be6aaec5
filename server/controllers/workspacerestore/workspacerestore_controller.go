// Package workspacerestore runs WorkspaceRestores: a WorkspaceRestore in a
// parent workspace brings one of its child workspaces back to an earlier
// state from the change history (storage/restore). While it runs, the
// child's LogicalCluster carries tenancy.RestoreAnnotation, which freezes
// the child (read-only for everyone but kcp); a restore that stops half way
// (kill -9) keeps it frozen and resumes when the controller runs again,
// since a plan recomputed from the history is exactly the rest of the work.
package workspacerestore

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/restore"
)

const name = "kcp-workspace-restore"

// Frozen reports whether a cluster refuses tenants' writes (the
// logicalclusters registry); nil: do not wait for the freeze to be seen.
type Frozen func(logicalcluster.Name) (string, bool)

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	queue    workqueue.TypedRateLimitingInterface[string]
	indexer  cache.Indexer
	informer cache.Controller
	r        *reconciler
}

// NewController watches WorkspaceRestores of all logical clusters with one
// watch.
func NewController(loopback *rest.Config, source restore.Source, writer restore.Writer, frozen Frozen) (*Controller, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name)}
	restores := wildcard.Resource(tenancy.WorkspaceRestoresResource)
	enqueue := func(obj interface{}) {
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	c.indexer, c.informer = clusterinformer.New(clusterinformer.ListWatch(restores.List, restores.Watch), &unstructured.Unstructured{}, nil,
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj interface{}) { enqueue(obj) }})
	c.r = &reconciler{source: source, writer: writer, frozen: frozen, clients: clients, now: time.Now}
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

var updateOptions = metav1.UpdateOptions{}
