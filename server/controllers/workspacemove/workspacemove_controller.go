// Package workspacemove runs WorkspaceMoves: a WorkspaceMove in a parent
// workspace moves one of its child workspaces to another shard online. The
// controller runs on the parent's shard and drives the shards' move API
// (server/movepeer) as a peer: copy the workspace's stored rows to the new
// shard while it is writable (every row, then what changed during that
// copy), freeze it on its shard (read-only, reads and watches go on), stop
// the old shard serving it (its watches end; it answers 503), copy only
// what changed since the pre-copy (kine revisions above it, read once),
// create its LogicalCluster on the new shard (which the front proxy then
// routes to), record the new shard in the Workspace's spec.shard, and
// delete the old copy. Every step is idempotent and the state of the
// shards says which steps are done, so a move that stops half way (kill -9
// of any shard) resumes when the controller runs again; until then the
// workspace stays readable. A move that fails, or whose WorkspaceMove is
// deleted, before the new shard serves the workspace is undone: the old
// shard serves it and takes writes again, the new shard's partial copy is
// deleted (workspacemove_reconcile_undo.go).
package workspacemove

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/shards"
)

const name = "kcp-workspace-move"

// Controller is the informer and queue plumbing; the work is in reconcile.
type Controller struct {
	w *worker.Wildcard
	r *reconciler
}

// NewController watches WorkspaceMoves of all logical clusters with one
// watch.
func NewController(loopback *rest.Config, m *shards.Membership) (*Controller, error) {
	w, err := worker.NewWildcard(loopback, name, tenancy.WorkspaceMovesResource)
	if err != nil {
		return nil, err
	}
	return &Controller{w: w, r: &reconciler{m: m, clients: w.Clients, peers: &peers{m: m}, now: time.Now}}, nil
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.w.Run(ctx, workers, c.r.reconcile) }

var updateOptions = metav1.UpdateOptions{}
