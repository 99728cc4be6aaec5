// Package worker is the queue loop every shared controller runs: wait for
// its informers, then process keys with a few workers, retrying failures
// with backoff and honouring requested delays, until the context ends.
package worker

import (
	"context"
	"errors"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/panics"
)

// Process handles one key; a positive duration asks to see the key again
// after it, an error retries it with backoff.
type Process[T comparable] func(ctx context.Context, key T) (time.Duration, error)

// NewQueue returns the rate-limited queue a controller named name uses.
func NewQueue[T comparable](name string) workqueue.TypedRateLimitingInterface[T] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[T](),
		workqueue.TypedRateLimitingQueueConfig[T]{Name: name})
}

// Run starts informers, waits until they have synced, runs workers and
// blocks until ctx ends; then it shuts the queue down.
func Run[T comparable](ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[T], workers int, informers []cache.Controller, process Process[T]) {
	defer utilruntime.HandleCrash()
	defer q.ShutDown()
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, i := range informers {
		go i.RunWithContext(ctx)
		synced = append(synced, i.HasSynced)
	}
	if !clusterinformer.WaitForSync(ctx, synced...) {
		return
	}
	klog.InfoS("started controller", "controller", name)
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for next(ctx, name, q, process) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func next[T comparable](ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[T], process Process[T]) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	var after time.Duration
	err := panics.Recover(name, func() (err error) {
		after, err = process(ctx, key)
		return err
	})
	var p *panics.Error
	switch {
	case errors.As(err, &p):
		// An object the controller cannot handle: reported and retried
		// with backoff, never the end of the server.
		klog.ErrorS(err, "controller panicked on a key; retrying it with backoff", "controller", name, "key", key, "stack", string(p.Stack))
		q.AddRateLimited(key)
	case err != nil:
		klog.V(2).InfoS("will retry", "controller", name, "key", key, "err", err)
		q.AddRateLimited(key)
	case after > 0:
		q.Forget(key)
		q.AddAfter(key, after)
	default:
		q.Forget(key)
	}
	return true
}
