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

	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/restore"
)

const name = "kcp-workspace-snapshot"

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	w *worker.Wildcard
	r *reconciler
}

// NewController watches WorkspaceSnapshots of all logical clusters with
// one watch.
func NewController(loopback *rest.Config, source restore.Source) (*Controller, error) {
	w, err := worker.NewWildcard(loopback, name, tenancy.WorkspaceSnapshotsResource)
	if err != nil {
		return nil, err
	}
	return &Controller{w: w, r: &reconciler{db: source.DB, dialect: source.Dialect, bg: source.Background, clients: w.Clients, now: time.Now}}, nil
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.w.Run(ctx, workers, c.r.reconcile) }
