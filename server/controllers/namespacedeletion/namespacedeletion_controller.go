// Package namespacedeletion finishes namespace deletion in every logical
// cluster with one shared controller (see README.md).
package namespacedeletion

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/clusterinformer"
)

const name = "kcp-namespace-deletion"

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	queue     workqueue.TypedRateLimitingInterface[string]
	informer  cache.Controller
	indexer   cache.Indexer
	reconcile func(ctx context.Context, key string) error
}

// NewController builds the controller on the server's loopback config.
func NewController(loopback *rest.Config) (*Controller, error) {
	wildcard, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	c := &Controller{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
	}
	lw := cache.NewListWatchFromClient(wildcard.CoreV1().RESTClient(), "namespaces", "", fields.Everything())
	c.indexer, c.informer = clusterinformer.New(lw, &corev1.Namespace{}, nil, cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
	})
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
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	go c.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return
	}
	klog.InfoS("started controller", "controller", name)
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) worker(ctx context.Context) {
	for c.next(ctx) {
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.reconcile(ctx, key)
	var remaining *requeueAfter
	switch {
	case err == nil:
		c.queue.Forget(key)
	case errors.As(err, &remaining):
		c.queue.AddAfter(key, remaining.after)
	default:
		klog.V(2).InfoS("namespace deletion will be retried", "key", key, "err", err)
		c.queue.AddRateLimited(key)
	}
	return true
}
