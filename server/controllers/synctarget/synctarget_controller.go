// Package synctarget keeps the Ready condition of every SyncTarget in every
// logical cluster honest: the syncer sets it True with each heartbeat, this
// controller sets it False once the heartbeat is older than the target's
// timeout (see README.md).
package synctarget

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
)

const name = "kcp-synctarget-heartbeat"

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	w *worker.Wildcard
	r *reconciler
}

// NewController watches SyncTargets of all logical clusters with one watch.
// timeout applies to targets that do not set spec.heartbeatTimeout.
func NewController(loopback *rest.Config, timeout time.Duration) (*Controller, error) {
	w, err := worker.NewWildcard(loopback, name, workload.SyncTargetsResource)
	if err != nil {
		return nil, err
	}
	c := &Controller{w: w}
	c.r = &reconciler{
		now:     time.Now,
		timeout: timeout,
		updateStatus: func(ctx context.Context, obj *unstructured.Unstructured) error {
			d, err := w.Clients.Dynamic(clusterinformer.ClusterOf(obj))
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
func (c *Controller) Run(ctx context.Context, workers int) { c.w.Run(ctx, workers, c.r.reconcile) }
