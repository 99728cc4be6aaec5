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
