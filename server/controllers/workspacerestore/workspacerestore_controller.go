// Package workspacerestore runs WorkspaceRestores: a WorkspaceRestore in a
// parent workspace brings one of its child workspaces back to an earlier
// state from the change history or a snapshot (storage/restore). While it
// runs, the written workspace's LogicalCluster carries
// tenancy.RestoreAnnotation, which freezes it (read-only for everyone but
// kcp); a restore that stops half way (kill -9) keeps it frozen and resumes
// when the controller runs again, since a plan recomputed from the history
// is exactly the rest of the work.
package workspacerestore

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/tenancy"
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
	w *worker.Wildcard
	r *reconciler
}

// NewController watches WorkspaceRestores of all logical clusters with one
// watch.
func NewController(loopback *rest.Config, source restore.Source, writer restore.Writer, frozen Frozen) (*Controller, error) {
	w, err := worker.NewWildcard(loopback, name, tenancy.WorkspaceRestoresResource)
	if err != nil {
		return nil, err
	}
	return &Controller{w: w, r: &reconciler{source: source, writer: writer, frozen: frozen, clients: w.Clients, now: time.Now}}, nil
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.w.Run(ctx, workers, c.r.reconcile) }

var updateOptions = metav1.UpdateOptions{}
