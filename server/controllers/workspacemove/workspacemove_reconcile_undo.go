package workspacemove

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/movepeer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// finalizer holds a running WorkspaceMove: deleted while it runs, the
// move is undone (or, once the new shard serves the workspace, completed)
// before it goes.
const finalizer = "tenancy.kcp.io/workspacemove"

// precopyRounds bounds the copies made while the workspace is writable;
// smallDelta is a change set small enough to leave to the frozen copy.
const (
	precopyRounds = 3
	smallDelta    = 200
)

// precopy copies the workspace while it is writable: every row, then what
// changed during that copy (and once more if that was still large). It
// returns the old shard's revision the new shard's copy is as of, which
// status.precopyRevision keeps for the frozen copy (and a resumed move).
func (r *reconciler) precopy(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured, base movepeer.Request, from, to string) (int64, error) {
	r.step(ctx, parent, wm, "Precopying", fmt.Sprintf("copying %s from shard %s to shard %s while it is writable", base.Cluster, from, to))
	since := int64(0)
	for round := 0; round < precopyRounds; round++ {
		if err := r.stillWanted(ctx, parent, wm); err != nil {
			return 0, err
		}
		pre := base
		pre.Precopy, pre.Since = true, since
		var exp movepeer.Export
		if err := r.peers.call(ctx, from, "export", pre, &exp); err != nil {
			return 0, conflictRefused(err)
		}
		pre.Since = 0
		pre.Rows, pre.Deleted, pre.Delta, pre.Revision = exp.Rows, exp.Deleted, exp.Delta, exp.Revision
		if err := r.peers.call(ctx, to, "import", pre, nil); err != nil {
			return 0, conflictRefused(err)
		}
		since = exp.Revision
		if !exp.Delta {
			_ = unstructured.SetNestedField(wm.Object, int64(len(exp.Rows)), "status", "objects")
		}
		_ = unstructured.SetNestedField(wm.Object, since, "status", "precopyRevision")
		if exp.Delta && len(exp.Rows)+len(exp.Deleted) < smallDelta {
			break
		}
	}
	return since, nil
}

// fail ends the move as Failed. Once its copy started, what it did is
// undone first: the old shard serves the workspace again and takes writes,
// and the new shard's partial copy, which it does not serve, is deleted
// (through its move API, by kine deletes); the status says so. A move
// whose new shard serves the workspace already is not undone: it
// completes.
func (r *reconciler) fail(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured, why string) error {
	if _, started, _ := unstructured.NestedString(wm.Object, "status", "startedAt"); started {
		_ = unstructured.SetNestedField(wm.Object, why, "status", "failing")
		cleanup, switched, err := r.undo(ctx, wm)
		if err != nil {
			setPhase(wm, tenancy.MoveRunning, fmt.Sprintf("failing (%s); undoing it: %v", why, err))
			if uerr := r.updateStatus(ctx, parent, wm); uerr != nil {
				klog.V(2).InfoS("WorkspaceMove status not written", "move", wm.GetName(), "err", uerr)
			}
			return err
		}
		if switched {
			unstructured.RemoveNestedField(wm.Object, "status", "failing")
			klog.InfoS("A WorkspaceMove failed after the new shard served the workspace: completing it", "move", wm.GetName(), "reason", why)
			_, err := r.move(ctx, parent, wm)
			return err
		}
		_ = unstructured.SetNestedField(wm.Object, cleanup, "status", "cleanup")
		why += "; " + cleanup
	}
	setPhase(wm, tenancy.MoveFailed, why)
	_ = unstructured.SetNestedField(wm.Object, r.now().UTC().Format(time.RFC3339), "status", "completedAt")
	unstructured.RemoveNestedField(wm.Object, "status", "step")
	unstructured.RemoveNestedField(wm.Object, "status", "retryingSince")
	klog.InfoS("A WorkspaceMove failed", "move", wm.GetName(), "reason", why)
	if err := r.updateStatus(ctx, parent, wm); err != nil {
		return err
	}
	return r.dropFinalizer(ctx, parent, wm)
}

// withdraw handles a WorkspaceMove deleted while it runs.
func (r *reconciler) withdraw(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured) (time.Duration, error) {
	if !hasFinalizer(wm) {
		return 0, nil
	}
	if _, started, _ := unstructured.NestedString(wm.Object, "status", "startedAt"); !started {
		return 0, r.dropFinalizer(ctx, parent, wm)
	}
	cleanup, switched, err := r.undo(ctx, wm)
	if err != nil {
		return 0, err
	}
	if switched {
		// The new shard serves the workspace: the move completes (the
		// old copy is deleted), then the finalizer goes.
		return r.move(ctx, parent, wm)
	}
	klog.InfoS("Withdrew a WorkspaceMove deleted while it ran", "move", wm.GetName(), "parent", parent, "cleanup", cleanup)
	return 0, r.dropFinalizer(ctx, parent, wm)
}

// undo takes back what a move that has not switched did: the old shard
// serves the workspace and takes writes again, the new shard's partial
// copy is deleted. switched: the new shard serves the workspace (nothing
// undone; the move must complete instead).
func (r *reconciler) undo(ctx context.Context, wm *unstructured.Unstructured) (string, bool, error) {
	wsName, _, _ := unstructured.NestedString(wm.Object, "spec", "workspace")
	to, _, _ := unstructured.NestedString(wm.Object, "spec", "toShard")
	from, _, _ := unstructured.NestedString(wm.Object, "status", "fromShard")
	child := logicalcluster.Name(string(clusterinformer.ClusterOf(wm)) + ":" + wsName)
	if from == "" || from == to {
		return "nothing to undo", false, nil
	}
	var src, dst movepeer.State
	if err := r.peers.call(ctx, from, "state", movepeer.Request{Cluster: child}, &src); err != nil {
		return "", false, err
	}
	if err := r.peers.call(ctx, to, "state", movepeer.Request{Cluster: child}, &dst); err != nil {
		return "", false, err
	}
	if dst.Exists && strings.HasPrefix(dst.MovedFrom, from+"@") && (!src.Exists || src.UID == dst.UID) {
		return "", true, nil
	}
	req := movepeer.Request{Cluster: child, Move: tenancy.MoveValue(to, wm.GetName())}
	if src.Exists && src.Move != req.Move && src.Claim != req.Move {
		// Another move copies it, or none: rows on the new shard are not
		// this move's to delete.
		if held := src.Move + src.Claim; held != "" {
			return fmt.Sprintf("nothing undone: %s is held by another move (%s), whose copy stays", child, held), false, nil
		}
		return "nothing to undo: this move had not started copying", false, nil
	}
	// The old shard serves and takes writes first; its claim goes last,
	// once the partial copy is gone, so that an undo cut short is done
	// again by the next reconcile.
	var notes []string
	if src.Exists {
		if err := r.peers.call(ctx, from, "thaw", req, nil); err != nil {
			return "", false, err
		}
		notes = append(notes, fmt.Sprintf("shard %s serves %s again and takes writes", from, child))
	}
	var res movepeer.Result
	if err := r.peers.call(ctx, to, "discard", req, &res); err != nil {
		var pe *peerError
		if !errors.As(err, &pe) || pe.code != 409 {
			return "", false, err
		}
		notes = append(notes, "shard "+to+" left as it is: "+pe.msg)
	} else {
		notes = append(notes, fmt.Sprintf("the partial copy on shard %s was deleted (%d objects)", to, res.Objects))
	}
	if src.Exists {
		unclaim := req
		unclaim.Unclaim = true
		if err := r.peers.call(ctx, from, "thaw", unclaim, nil); err != nil {
			return "", false, err
		}
	}
	return "undone: " + strings.Join(notes, "; "), false, nil
}

// errWithdrawn stops a move whose WorkspaceMove was deleted while it ran;
// the next reconcile undoes it.
var errWithdrawn = errors.New("the WorkspaceMove was deleted: undoing the move")

// stillWanted is errWithdrawn once the WorkspaceMove is being deleted
// (read live: a deletion while the move runs must stop it before the
// freeze, not after the switch).
func (r *reconciler) stillWanted(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured) error {
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return err
	}
	live, err := d.Resource(tenancy.WorkspaceMovesResource).Get(ctx, wm.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && live.GetDeletionTimestamp() != nil) {
		return errWithdrawn
	}
	return err
}

func hasFinalizer(wm *unstructured.Unstructured) bool {
	return slices.Contains(wm.GetFinalizers(), finalizer)
}

func (r *reconciler) addFinalizer(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured) error {
	if hasFinalizer(wm) {
		return nil
	}
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return err
	}
	wm.SetFinalizers(append(wm.GetFinalizers(), finalizer))
	updated, err := d.Resource(tenancy.WorkspaceMovesResource).Update(ctx, wm, updateOptions)
	if err != nil {
		return err
	}
	wm.Object = updated.Object
	return nil
}

func (r *reconciler) dropFinalizer(ctx context.Context, parent logicalcluster.Name, wm *unstructured.Unstructured) error {
	if !hasFinalizer(wm) {
		return nil
	}
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return err
	}
	wm.SetFinalizers(slices.DeleteFunc(wm.GetFinalizers(), func(f string) bool { return f == finalizer }))
	_, err = d.Resource(tenancy.WorkspaceMovesResource).Update(ctx, wm, updateOptions)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
