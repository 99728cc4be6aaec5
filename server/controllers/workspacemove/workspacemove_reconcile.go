package workspacemove

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/movepeer"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

type reconciler struct {
	m       *shards.Membership
	clients *clusterinformer.Clients
	peers   *peers
	now     func() time.Time
}

// refused ends a move: it cannot be done as asked.
type refused string

func (r refused) Error() string { return string(r) }

func (r *reconciler) reconcile(ctx context.Context, wm *unstructured.Unstructured) (time.Duration, error) {
	if ended(wm) && !hasFinalizer(wm) {
		return 0, nil
	}
	parent := clusterinformer.ClusterOf(wm)
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return 0, err
	}
	// The informer may lag: the live object says whether it ended.
	live, err := d.Resource(tenancy.WorkspaceMovesResource).Get(ctx, wm.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	wm = live
	if ended(wm) {
		return 0, r.dropFinalizer(ctx, parent, wm)
	}
	if wm.GetDeletionTimestamp() != nil {
		// Deleted while it runs: what it did is undone (or, once
		// switched, completed), then the finalizer goes.
		return r.withdraw(ctx, parent, wm)
	}
	if err := r.addFinalizer(ctx, parent, wm); err != nil {
		return 0, err
	}
	if why, _, _ := unstructured.NestedString(wm.Object, "status", "failing"); why != "" {
		return 0, r.fail(ctx, parent, wm, why)
	}
	again, err := r.move(ctx, parent, wm)
	var ref refused
	switch {
	case errors.As(err, &ref):
		return 0, r.fail(ctx, parent, wm, err.Error())
	case errors.Is(err, errWithdrawn):
		return 100 * time.Millisecond, nil // the next reconcile withdraws it
	case err != nil:
		// Tried again with backoff; the status says why it waits. An
		// error that lasts failAfter once the copy started fails the move
		// (its partial copy removed) unless the new shard serves it.
		since, _, _ := unstructured.NestedString(wm.Object, "status", "retryingSince")
		first, perr := time.Parse(time.RFC3339, since)
		if perr != nil {
			first = r.now()
			_ = unstructured.SetNestedField(wm.Object, first.UTC().Format(time.RFC3339), "status", "retryingSince")
		}
		if _, started, _ := unstructured.NestedString(wm.Object, "status", "startedAt"); started && r.now().Sub(first) > failAfter {
			return 0, r.fail(ctx, parent, wm, fmt.Sprintf("failing for more than %s: %v", failAfter, err))
		}
		setPhase(wm, tenancy.MoveRunning, "retrying: "+err.Error())
		if uerr := r.updateStatus(ctx, parent, wm); uerr != nil {
			klog.V(2).InfoS("WorkspaceMove status not written", "move", wm.GetName(), "err", uerr)
		}
		return 0, err
	}
	return again, nil
}

// failAfter is how long a move retries an error once its copy started
// before it fails and removes the copy.
const failAfter = 15 * time.Minute

// progressed: a step succeeded, so errors before it do not count toward
// failAfter (written with the next status).
func progressed(wm *unstructured.Unstructured) {
	unstructured.RemoveNestedField(wm.Object, "status", "retryingSince")
}

func ended(wm *unstructured.Unstructured) bool {
	p, _, _ := unstructured.NestedString(wm.Object, "status", "phase")
	return p == tenancy.MoveSucceeded || p == tenancy.MoveFailed
}

// move does what is left of the move.
func (r *reconciler) move(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured) (time.Duration, error) {
	wsName, _, _ := unstructured.NestedString(wm.Object, "spec", "workspace")
	to, _, _ := unstructured.NestedString(wm.Object, "spec", "toShard")
	child := logicalcluster.Name(string(parent) + ":" + wsName)
	if !r.m.Sharded() {
		return 0, refused("this kcp is one server, not one of several shards (kcp start --shards-file): there is no shard to move to")
	}
	if _, ok := r.m.Config.Get(to); !ok {
		return 0, refused(fmt.Sprintf("no shard is named %q; the shards are: %s", to, strings.Join(r.m.Config.Names(), ", ")))
	}
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return 0, err
	}
	wss := d.Resource(tenancy.WorkspacesResource)
	ws, err := wss.Get(ctx, wsName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, refused(fmt.Sprintf("there is no Workspace %s in %s", wsName, parent))
	}
	if err != nil {
		return 0, err
	}
	from, _, _ := unstructured.NestedString(wm.Object, "status", "fromShard")
	if from == "" {
		from, _, _ = unstructured.NestedString(ws.Object, "spec", "shard")
		if from == "" {
			from = r.m.Self
		}
		_ = unstructured.SetNestedField(wm.Object, from, "status", "fromShard")
	}
	var src, dst movepeer.State
	if err := r.peers.call(ctx, from, "state", movepeer.Request{Cluster: child}, &src); err != nil {
		return 0, err
	}
	if err := r.peers.call(ctx, to, "state", movepeer.Request{Cluster: child}, &dst); err != nil {
		return 0, err
	}
	moveValue := tenancy.MoveValue(to, wm.GetName())
	switched := dst.Exists && strings.HasPrefix(dst.MovedFrom, from+"@") && (!src.Exists || src.UID == dst.UID)
	if !switched {
		switch {
		case from == to:
			return 0, refused(fmt.Sprintf("workspace %s is on shard %s already", child, to))
		case !src.Exists:
			return 0, refused(fmt.Sprintf("shard %s does not hold the logical cluster of workspace %s", from, child))
		case src.Children:
			return 0, refused(fmt.Sprintf("workspace %s has child workspaces: a move takes one workspace, not a tree; move or delete the workspaces below it first", child))
		case dst.Exists:
			return 0, refused(fmt.Sprintf("shard %s already holds a logical cluster %s (UID %s)", to, child, dst.UID))
		}
		if p, _, _ := unstructured.NestedString(ws.Object, "status", "phase"); p != tenancy.PhaseReady {
			setPhase(wm, tenancy.MovePending, fmt.Sprintf("waiting for Workspace %s to be Ready (it is %s)", wsName, p))
			return 2 * time.Second, r.updateStatus(ctx, parent, wm)
		}
		held := src.Move
		if held == "" || held == moveValue {
			held = src.Claim
		}
		if held != "" && held != moveValue {
			_, other := tenancy.ParseMove(held)
			setPhase(wm, tenancy.MovePending, fmt.Sprintf("waiting for WorkspaceMove %s, which is moving %s", other, child))
			return 2 * time.Second, r.updateStatus(ctx, parent, wm)
		}
		if _, ok, _ := unstructured.NestedString(wm.Object, "status", "startedAt"); !ok {
			_ = unstructured.SetNestedField(wm.Object, r.now().UTC().Format(time.RFC3339Nano), "status", "startedAt")
		}
		base := movepeer.Request{Cluster: child, Move: moveValue, FromShard: from, ParentShard: r.m.Self}
		// The old shard's revision the last pre-copy copied at: the
		// target holds the workspace as of it.
		since, _, _ := unstructured.NestedInt64(wm.Object, "status", "precopyRevision")
		if src.Move == "" {
			// Copies while the workspace is still writable: a whole one,
			// then what changed during it, so that the frozen copy after
			// them has little to send.
			var err error
			if since, err = r.precopy(ctx, parent, wm, base, from, to); err != nil {
				return 0, err
			}
			progressed(wm)
		}
		if src.MovedTo == "" {
			// Deleted meanwhile: not frozen, but undone (withdraw).
			if err := r.stillWanted(ctx, parent, wm); err != nil {
				return 0, err
			}
			r.step(ctx, parent, wm, "Freezing", fmt.Sprintf("freezing %s on shard %s", child, from))
			if err := r.peers.call(ctx, from, "freeze", base, nil); err != nil {
				return 0, conflictRefused(err)
			}
			progressed(wm)
			if _, ok, _ := unstructured.NestedString(wm.Object, "status", "frozenAt"); !ok {
				_ = unstructured.SetNestedField(wm.Object, r.now().UTC().Format(time.RFC3339Nano), "status", "frozenAt")
			}
		}
		// One read of the old shard, after it stopped serving the
		// workspace: what changed since the last pre-copy (or, without
		// one, every row).
		r.step(ctx, parent, wm, "Copying", fmt.Sprintf("copying %s from shard %s to shard %s: what changed since the pre-copy (read-only meanwhile)", child, from, to))
		fin := base
		fin.Final = true
		fin.Since = since
		var exp movepeer.Export
		if err := r.peers.call(ctx, from, "export", fin, &exp); err != nil {
			return 0, err
		}
		fin.Since = 0
		fin.Rows, fin.Deleted, fin.Delta, fin.Revision = exp.Rows, exp.Deleted, exp.Delta, exp.Revision
		var res movepeer.Result
		if err := r.peers.call(ctx, to, "import", fin, &res); err != nil {
			return 0, conflictRefused(err)
		}
		copied := fmt.Sprintf("delta since revision %d: %d objects written, %d deleted", since, len(exp.Rows)-1, len(exp.Deleted))
		switch {
		case !exp.Delta && since == 0:
			copied = fmt.Sprintf("full comparison of %d objects: no pre-copy revision recorded (the move resumed after a restart)", len(exp.Rows))
		case !exp.Delta:
			copied = fmt.Sprintf("full comparison of %d objects: %s", len(exp.Rows), exp.Full)
		}
		_ = unstructured.SetNestedField(wm.Object, copied, "status", "frozenCopy")
		if !exp.Delta {
			_ = unstructured.SetNestedField(wm.Object, int64(len(exp.Rows)), "status", "objects")
		}
		_ = unstructured.SetNestedField(wm.Object, exp.Revision, "status", "sourceRevision")
		now := r.now().UTC()
		_ = unstructured.SetNestedField(wm.Object, now.Format(time.RFC3339Nano), "status", "switchedAt")
		if fz, ok, _ := unstructured.NestedString(wm.Object, "status", "frozenAt"); ok {
			if t, err := time.Parse(time.RFC3339Nano, fz); err == nil {
				_ = unstructured.SetNestedField(wm.Object, now.Sub(t).Seconds(), "status", "readOnlySeconds")
			}
		}
		progressed(wm)
		klog.InfoS("Copied a frozen workspace", "workspace", child, "from", from, "to", to, "copy", copied, "move", wm.GetName())
	}
	// The Workspace names the shard that holds it now: its controller
	// (closing, deleting, copying spec.frozen) goes there.
	if cur, _, _ := unstructured.NestedString(ws.Object, "spec", "shard"); cur != to {
		r.step(ctx, parent, wm, "Switching", fmt.Sprintf("recording shard %s in Workspace %s", to, wsName))
		if err := unstructured.SetNestedField(ws.Object, to, "spec", "shard"); err != nil {
			return 0, err
		}
		if _, err := wss.Update(ctx, ws, updateOptions); err != nil {
			return 0, err
		}
	}
	r.step(ctx, parent, wm, "Deleting", fmt.Sprintf("deleting the copy of %s on shard %s", child, from))
	unstructured.RemoveNestedField(wm.Object, "status", "retryingSince")
	if err := r.peers.call(ctx, from, "release", movepeer.Request{Cluster: child}, nil); err != nil {
		return 0, err
	}
	objects, _, _ := unstructured.NestedInt64(wm.Object, "status", "objects")
	ro, _, _ := unstructured.NestedFloat64(wm.Object, "status", "readOnlySeconds")
	_ = unstructured.SetNestedField(wm.Object, r.now().UTC().Format(time.RFC3339Nano), "status", "completedAt")
	unstructured.RemoveNestedField(wm.Object, "status", "step")
	setPhase(wm, tenancy.MoveSucceeded, fmt.Sprintf("moved %s from shard %s to shard %s: %d objects, read-only for %.2f s", child, from, to, objects, ro))
	klog.InfoS("Moved a workspace", "workspace", child, "from", from, "to", to, "objects", objects, "readOnlySeconds", ro, "move", wm.GetName())
	if err := r.updateStatus(ctx, parent, wm); err != nil {
		return 0, err
	}
	return 0, r.dropFinalizer(ctx, parent, wm)
}

// conflictRefused turns a shard's 409 (the cluster's state refuses the
// call: another move or a restore holds it) into a refusal.
func conflictRefused(err error) error {
	var pe *peerError
	if errors.As(err, &pe) && pe.code == 409 {
		return refused(pe.Error())
	}
	return err
}

// step records where the move is (best effort: the move goes on if the
// status cannot be written).
func (r *reconciler) step(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured, step, msg string) {
	_ = unstructured.SetNestedField(wm.Object, step, "status", "step")
	setPhase(wm, tenancy.MoveRunning, msg)
	if err := r.updateStatus(ctx, parent, wm); err != nil {
		klog.V(2).InfoS("WorkspaceMove status not written", "move", wm.GetName(), "err", err)
	}
}

func (r *reconciler) updateStatus(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured) error {
	return r.clients.UpdateStatus(ctx, parent, tenancy.WorkspaceMovesResource, wm)
}

func setPhase(wm *unstructured.Unstructured, phase, message string) {
	_ = unstructured.SetNestedField(wm.Object, phase, "status", "phase")
	_ = unstructured.SetNestedField(wm.Object, message, "status", "message")
}
