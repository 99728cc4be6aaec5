// Package synctarget keeps the Ready condition of every SyncTarget in every
// logical cluster honest: the syncer sets it True with each heartbeat, this
// controller sets it False once the heartbeat is older than the target's
// timeout (see README.md).
package synctarget

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
)

const name = "kcp-synctarget-heartbeat"

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	queue    workqueue.TypedRateLimitingInterface[string]
	indexer  cache.Indexer
	informer cache.Controller
	r        *reconciler
}

// NewController watches SyncTargets of all logical clusters with one watch.
// timeout applies to targets that do not set spec.heartbeatTimeout.
func NewController(loopback *rest.Config, timeout time.Duration) (*Controller, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name)}
	targets := wildcard.Resource(workload.SyncTargetsResource)
	enqueue := func(obj interface{}) {
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	c.indexer, c.informer = clusterinformer.New(clusterinformer.ListWatch(targets.List, targets.Watch), &unstructured.Unstructured{}, nil,
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj interface{}) { enqueue(obj) }})
	c.r = &reconciler{
		now:     time.Now,
		timeout: timeout,
		updateStatus: func(ctx context.Context, obj *unstructured.Unstructured) error {
			d, err := clients.Dynamic(clusterinformer.ClusterOf(obj))
			if err != nil {
				return err
			}
			_, err = d.Resource(workload.SyncTargetsResource).UpdateStatus(ctx, obj, metav1UpdateOptions)
			return err
		},
	}
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
