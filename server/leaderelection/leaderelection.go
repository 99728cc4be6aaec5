// Package leaderelection makes the shared controllers that write run on one
// replica at a time when several kcp processes serve one PostgreSQL
// database: a Lease in root's kube-system, upstream's leader election, and a
// new campaign whenever the lease is lost.
package leaderelection

import (
	"context"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	le "k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Campaign is a Run that can be ended and its lease given up, for a
// replica that shuts down: the replica that takes over then starts at once
// rather than when the lease expires (15 s).
type Campaign struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs Run in the background until ctx ends or Release is called.
func Start(ctx context.Context, loopback *rest.Config, name string, lead func(ctx context.Context)) *Campaign {
	ctx, cancel := context.WithCancel(ctx)
	c := &Campaign{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		Run(ctx, loopback, name, lead)
	}()
	return c
}

// Release ends the campaign: the controllers' context ends and, if this
// replica held the lease, the lease is written as free. It returns when
// that is done or after timeout. It must be called while the server still
// serves its loopback (a pre-shutdown hook), or the write cannot reach it.
func (c *Campaign) Release(timeout time.Duration) {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(timeout):
		klog.InfoS("the controllers' lease was not released in time; another replica takes over when it expires", "timeout", timeout)
	}
}

// Run campaigns for the lease name until ctx ends; while this replica holds
// it, lead runs with a context that ends when the lease is lost.
func Run(ctx context.Context, loopback *rest.Config, name string, lead func(ctx context.Context)) {
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		klog.ErrorS(err, "leader election")
		return
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, "kube-system", name,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		klog.ErrorS(err, "leader election")
		return
	}
	for ctx.Err() == nil {
		le.RunOrDie(ctx, le.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Name:            name,
			Callbacks: le.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					klog.InfoS("this replica runs the controllers", "lease", name, "identity", id)
					lead(ctx)
					<-ctx.Done()
				},
				OnStoppedLeading: func() { klog.InfoS("this replica stopped running the controllers", "lease", name) },
			},
		})
	}
}
