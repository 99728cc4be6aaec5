package workspacesnapshot

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/snapshots"
)

type reconciler struct {
	db      *sql.DB
	dialect datastore.Dialect
	// bg runs the snapshots' writes as background writes of the datastore.
	bg      snapshots.Runner
	clients *clusterinformer.Clients
	now     func() time.Time
}

func (r *reconciler) reconcile(ctx context.Context, ws *unstructured.Unstructured) (time.Duration, error) {
	parent := clusterinformer.ClusterOf(ws)
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return 0, err
	}
	res := d.Resource(tenancy.WorkspaceSnapshotsResource)
	if ws.GetDeletionTimestamp() != nil {
		if !slices.Contains(ws.GetFinalizers(), tenancy.SnapshotsFinalizer) {
			return 0, nil
		}
		if err := snapshots.DeleteAll(ctx, r.db, r.dialect, r.bg, string(parent), ws.GetName()); err != nil {
			return 0, err
		}
		ws.SetFinalizers(slices.DeleteFunc(ws.GetFinalizers(), func(f string) bool { return f == tenancy.SnapshotsFinalizer }))
		_, err = res.Update(ctx, ws, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	if !slices.Contains(ws.GetFinalizers(), tenancy.SnapshotsFinalizer) {
		ws.SetFinalizers(append(ws.GetFinalizers(), tenancy.SnapshotsFinalizer))
		updated, err := res.Update(ctx, ws, metav1.UpdateOptions{})
		if err != nil {
			return 0, err
		}
		ws = updated
	}
	wsName, _, _ := unstructured.NestedString(ws.Object, "spec", "workspace")
	child := logicalcluster.Name(string(parent) + ":" + wsName)
	var every time.Duration
	if s, ok, _ := unstructured.NestedString(ws.Object, "spec", "every"); ok {
		every, _ = time.ParseDuration(s)
	}
	keep, ok, _ := unstructured.NestedInt64(ws.Object, "spec", "keep")
	if !ok || keep < 1 {
		keep = 1
		if every > 0 {
			keep = 7
		}
	}
	// What a stopped process left half taken or half deleted (the queue
	// runs one reconcile of this WorkspaceSnapshot at a time).
	if err := snapshots.DeleteUnfinished(ctx, r.db, r.dialect, r.bg, string(parent), ws.GetName()); err != nil {
		return 0, err
	}
	list, err := snapshots.List(ctx, r.db, r.dialect, string(parent), ws.GetName())
	if err != nil {
		return 0, err
	}
	now := r.now()
	due := len(list) == 0 || (every > 0 && !now.Before(list[0].TakenAt.Add(every)))
	message := ""
	if due {
		phase := ""
		w, err := d.Resource(tenancy.WorkspacesResource).Get(ctx, wsName, metav1.GetOptions{})
		if err == nil {
			phase, _, _ = unstructured.NestedString(w.Object, "status", "phase")
		}
		switch {
		case apierrors.IsNotFound(err):
			message = fmt.Sprintf("there is no Workspace %s in %s", wsName, parent)
		case err != nil:
			return 0, err
		case phase != tenancy.PhaseReady:
			message = fmt.Sprintf("Workspace %s is %s, not Ready", wsName, phase)
		default:
			s, err := snapshots.Take(ctx, r.db, r.dialect, r.bg, child, string(parent), ws.GetName())
			if err != nil {
				return 0, fmt.Errorf("snapshot of %s: %w", child, err)
			}
			klog.InfoS("Took a workspace snapshot", "workspace", child, "snapshot", ws.GetName(), "id", s.ID, "revision", s.Revision, "objects", s.Objects, "bytes", s.Bytes)
			list = append([]snapshots.Snapshot{s}, list...)
			message = fmt.Sprintf("snapshot %d of %s taken at revision %d: %d objects", s.ID, child, s.Revision, s.Objects)
		}
	}
	for len(list) > int(keep) {
		old := list[len(list)-1]
		if err := snapshots.Delete(ctx, r.db, r.dialect, r.bg, old.ID); err != nil {
			return 0, err
		}
		list = list[:len(list)-1]
	}
	items := make([]interface{}, 0, len(list))
	for _, s := range list {
		items = append(items, map[string]interface{}{"id": s.ID, "revision": s.Revision, "takenAt": s.TakenAt.UTC().Format(time.RFC3339),
			"objects": s.Objects, "bytes": s.Bytes})
	}
	_ = unstructured.SetNestedSlice(ws.Object, items, "status", "snapshots")
	if message != "" {
		_ = unstructured.SetNestedField(ws.Object, message, "status", "message")
	}
	var next time.Duration
	if every > 0 {
		at := now.Add(every)
		if len(list) > 0 {
			at = list[0].TakenAt.Add(every)
		}
		_ = unstructured.SetNestedField(ws.Object, at.UTC().Format(time.RFC3339), "status", "nextAt")
		next = max(at.Sub(now), time.Second)
	} else if len(list) == 0 {
		next = 30 * time.Second // not Ready yet: look again
	}
	if _, err := res.UpdateStatus(ctx, ws, metav1.UpdateOptions{}); err != nil {
		return 0, err
	}
	return next, nil
}
