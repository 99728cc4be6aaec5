// Package namespacedeletion finishes namespace deletion in every logical
// cluster with one shared controller (see README.md).
package namespacedeletion

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
)

const name = "kcp-namespace-deletion"

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	queue      workqueue.TypedRateLimitingInterface[string]
	namespaces *clusterinformer.Namespaces
	reconcile  func(ctx context.Context, key string) error
}

// NewController builds the controller on the server's loopback config and
// its shared namespace informer.
func NewController(loopback *rest.Config, namespaces *clusterinformer.Namespaces) (*Controller, error) {
	c := &Controller{
		queue:      worker.NewQueue[string](name),
		namespaces: namespaces,
	}
	r := &reconciler{newDeleter: deleterFactory(loopback)}
	c.reconcile = r.reconcile
	return c, nil
}

func (c *Controller) enqueue(obj interface{}) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || ns.DeletionTimestamp == nil {
		return
	}
	key, err := clusterinformer.KeyFunc(ns)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// Run processes the queue with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.namespaces.AddEventHandlerUntil(ctx, cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
	})
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{c.namespaces.Synced()}, func(ctx context.Context, key string) (time.Duration, error) {
		err := c.reconcile(ctx, key)
		var remaining *requeueAfter
		if errors.As(err, &remaining) {
			return remaining.after, nil
		}
		return 0, err
	})
}
