package workspacerestore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/restore"
	"github.com/kcpsql/kcp/storage/snapshots"
)

type reconciler struct {
	source  restore.Source
	writer  restore.Writer
	frozen  Frozen
	clients *clusterinformer.Clients
	now     func() time.Time
}

// listed is how many changes a status lists one by one.
const listed = 200

// passes bounds how often a restore plans again after writes that found
// their key changed (kcp's own controllers may still write while frozen).
const passes = 10

func (r *reconciler) reconcile(ctx context.Context, wr *unstructured.Unstructured) (time.Duration, error) {
	phase, _, _ := unstructured.NestedString(wr.Object, "status", "phase")
	parent := clusterinformer.ClusterOf(wr)
	wsName, _, _ := unstructured.NestedString(wr.Object, "spec", "workspace")
	child := logicalcluster.Name(string(parent) + ":" + wsName)
	if phase == tenancy.RestoreSucceeded || phase == tenancy.RestoreFailed {
		return 0, nil
	}
	// The informer may not have seen this restore's end yet: a restore is
	// never run twice (a snapshot it read may be gone since).
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return 0, err
	}
	live, err := d.Resource(tenancy.WorkspaceRestoresResource).Get(ctx, wr.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if p, _, _ := unstructured.NestedString(live.Object, "status", "phase"); p == tenancy.RestoreSucceeded || p == tenancy.RestoreFailed {
		return 0, nil
	}
	wr, phase = live, ""
	if p, _, _ := unstructured.NestedString(live.Object, "status", "phase"); p != "" {
		phase = p
	}
	dryRun, _, _ := unstructured.NestedBool(wr.Object, "spec", "dryRun")
	var rev int64
	// From a snapshot (spec.snapshot) or from the change history.
	var snap *snapshots.Snapshot
	if snapName, ok, _ := unstructured.NestedString(wr.Object, "spec", "snapshot", "name"); ok {
		id, _, _ := unstructured.NestedInt64(wr.Object, "spec", "snapshot", "id")
		if err := r.readyWorkspace(ctx, parent, wsName); err != nil {
			return 0, r.failOrRetry(ctx, parent, wr, child, err)
		}
		if snap, err = r.findSnapshot(ctx, parent, snapName, id); err != nil {
			return 0, r.failOrRetry(ctx, parent, wr, child, err)
		}
		rev = snap.Revision
	} else if rev, err = r.resolve(ctx, parent, wsName, child, wr); err != nil {
		return 0, r.failOrRetry(ctx, parent, wr, child, err)
	}
	_ = unstructured.SetNestedField(wr.Object, rev, "status", "revision")
	// What is written: the workspace itself, or (spec.into) another
	// workspace of the parent that gets the state side by side.
	target := child
	if into, _, _ := unstructured.NestedString(wr.Object, "spec", "into"); into != "" {
		target = logicalcluster.Name(string(parent) + ":" + into)
		if into == wsName {
			return 0, r.fail(ctx, parent, wr, child, &restore.Refused{Reason: "spec.into names the workspace being restored; leave it out to restore in place"})
		}
		if err := r.readyWorkspace(ctx, parent, into); err != nil {
			return 0, r.failOrRetry(ctx, parent, wr, target, err)
		}
	}
	var plan func(ctx context.Context) (*restore.Plan, error)
	switch {
	case snap != nil:
		// A snapshot taken here of this very workspace must be of its
		// current life; a file's revisions are another datastore's.
		if snap.Cluster == target && !strings.HasPrefix(snap.Name, snapshots.FilePrefix) {
			began, err := r.source.Began(ctx, target)
			if err != nil {
				return 0, err
			}
			if snap.Revision < began {
				return 0, r.fail(ctx, parent, wr, target, &restore.Refused{Reason: fmt.Sprintf("snapshot %d of %s was taken at revision %d, before %s was created (revision %d): an earlier workspace of the same name is not restorable into it", snap.ID, snap.Cluster, snap.Revision, target, began)})
			}
		}
		plan = func(ctx context.Context) (*restore.Plan, error) {
			// A snapshot deleted meanwhile has no rows: never plan from that.
			if _, ok, err := snapshots.Get(ctx, r.source.DB, r.source.Dialect, snap.ID); err != nil || !ok {
				if err == nil {
					err = &restore.Refused{Reason: fmt.Sprintf("snapshot %d of %s was deleted during the restore", snap.ID, snap.Name)}
				}
				return nil, err
			}
			rows, err := snapshots.Rows(ctx, r.source.DB, r.source.Dialect, snap.ID)
			if err != nil {
				return nil, err
			}
			if snap.Objects < 0 {
				return nil, &restore.Refused{Reason: fmt.Sprintf("snapshot %d of %s is unfinished (being taken or deleted); restore another", snap.ID, snap.Name)}
			}
			if int64(len(rows)) != snap.Objects || len(rows) == 0 {
				// Written by a version that took snapshots in several
				// statements and stopped half way (a workspace always
				// holds its namespaces): restoring it would delete what
				// it lacks.
				return nil, &restore.Refused{Reason: fmt.Sprintf("snapshot %d of %s is incomplete (%d of its %d objects stored); restore another", snap.ID, snap.Name, len(rows), snap.Objects)}
			}
			return r.source.PlanInto(ctx, rows, snap.Cluster, target)
		}
	case target != child:
		plan = func(ctx context.Context) (*restore.Plan, error) {
			state, err := r.source.StateAt(ctx, child, rev)
			if err != nil {
				return nil, err
			}
			return r.source.PlanInto(ctx, state, child, target)
		}
	default:
		plan = func(ctx context.Context) (*restore.Plan, error) { return r.source.PlanTo(ctx, child, rev) }
	}
	// spec.recursive: the workspaces below it too, each to the same point.
	targets := []logicalcluster.Name{target}
	var leftAlone []logicalcluster.Name
	if recursive, _, _ := unstructured.NestedBool(wr.Object, "spec", "recursive"); recursive {
		if snap != nil || target != child {
			return 0, r.fail(ctx, parent, wr, child, &restore.Refused{Reason: "spec.recursive restores a workspace and the workspaces below it in place from the change history; it cannot be combined with spec.into or spec.snapshot"})
		}
		below, err := r.source.Below(ctx, child)
		if err != nil {
			return 0, err
		}
		for _, b := range below {
			began, err := r.source.Began(ctx, b)
			if err != nil {
				return 0, err
			}
			if began > rev {
				leftAlone = append(leftAlone, b) // created after the point
				continue
			}
			if err := r.source.Check(ctx, b, rev); err != nil {
				return 0, r.failOrRetry(ctx, parent, wr, child, err)
			}
			targets = append(targets, b)
		}
		plan = func(ctx context.Context) (*restore.Plan, error) {
			var plans []*restore.Plan
			for _, t := range targets {
				p, err := r.source.PlanTo(ctx, t, rev)
				if err != nil {
					return nil, err
				}
				plans = append(plans, p)
			}
			return restore.Combine(plans...), nil
		}
	}
	tree := ""
	if len(targets) > 1 {
		tree = fmt.Sprintf(" and %d workspaces below it", len(targets)-1)
	}
	if len(leftAlone) > 0 {
		tree += fmt.Sprintf(" (left as they are, created after that point: %v)", leftAlone)
	}
	if dryRun {
		p, err := plan(ctx)
		if err != nil {
			return 0, r.failOrRetry(ctx, parent, wr, target, err)
		}
		describe(wr, p)
		setPhase(wr, tenancy.RestoreSucceeded, fmt.Sprintf("dry run: restoring %s%s to revision %d would write %d objects of %s; nothing was written", child, tree, rev, len(p.Changes), target))
		_ = unstructured.SetNestedField(wr.Object, r.now().UTC().Format(time.RFC3339), "status", "completedAt")
		return 0, r.updateStatus(ctx, parent, wr)
	}

	// One restore of a workspace at a time.
	for _, t := range targets {
		lc, err := r.logicalCluster(ctx, t)
		if err != nil {
			return 0, err
		}
		if holder := lc.GetAnnotations()[tenancy.RestoreAnnotation]; holder != "" && holder != wr.GetName() {
			setPhase(wr, tenancy.RestorePending, fmt.Sprintf("waiting for WorkspaceRestore %s, which is writing %s", holder, t))
			return 2 * time.Second, r.updateStatus(ctx, parent, wr)
		}
	}
	if phase != tenancy.RestoreRunning {
		setPhase(wr, tenancy.RestoreRunning, fmt.Sprintf("freezing %s", target))
		_ = unstructured.SetNestedField(wr.Object, r.now().UTC().Format(time.RFC3339), "status", "startedAt")
		if err := r.updateStatus(ctx, parent, wr); err != nil {
			return 0, err
		}
	}
	for _, t := range targets {
		if err := r.setHolder(ctx, t, wr.GetName()); err != nil {
			return 0, err
		}
	}
	for _, t := range targets {
		if err := r.waitFrozen(ctx, t); err != nil {
			return 0, err
		}
	}
	klog.InfoS("Restoring a workspace", "workspace", child, "into", target, "revision", rev, "restore", wr.GetName(), "requestedBy", wr.GetAnnotations()[tenancy.OwnerAnnotation])
	written, remaining, err := r.run(ctx, parent, wr, target, rev, plan)
	if err != nil {
		if restore.IsRefused(err) {
			// Nothing more can be done; the freeze goes with the restore.
			for _, t := range targets[1:] {
				if err := r.release(ctx, wr, t); err != nil {
					return 0, err
				}
			}
			return 0, r.fail(ctx, parent, wr, target, err)
		}
		return 0, err // keeps the freeze; tried again with backoff
	}
	for _, t := range targets {
		if err := r.setHolder(ctx, t, ""); err != nil {
			return 0, err
		}
	}
	_ = unstructured.SetNestedField(wr.Object, r.now().UTC().Format(time.RFC3339), "status", "completedAt")
	if len(remaining) > 0 {
		keys := make([]string, 0, len(remaining))
		for _, ch := range remaining {
			keys = append(keys, string(ch.Action)+" "+ch.Key)
		}
		setPhase(wr, tenancy.RestoreFailed, fmt.Sprintf("restored %s to revision %d into %s except %d objects that kept changing: %v", child, rev, target, len(remaining), keys))
	} else if target != child {
		setPhase(wr, tenancy.RestoreSucceeded, fmt.Sprintf("restored %s as it was at revision %d into %s: %d writes", child, rev, target, written))
	} else {
		setPhase(wr, tenancy.RestoreSucceeded, fmt.Sprintf("restored %s%s to revision %d: %d writes", child, tree, rev, written))
	}
	klog.InfoS("Restored a workspace", "workspace", child, "into", target, "revision", rev, "restore", wr.GetName(), "writes", written, "notRestored", len(remaining))
	return 0, r.updateStatus(ctx, parent, wr)
}

// resolve checks the Workspace and turns spec.to into a revision.
func (r *reconciler) resolve(ctx context.Context, parent logicalcluster.Name, wsName string, child logicalcluster.Name, wr *unstructured.Unstructured) (int64, error) {
	if err := r.readyWorkspace(ctx, parent, wsName); err != nil {
		return 0, err
	}
	if rev, ok, _ := unstructured.NestedInt64(wr.Object, "spec", "revision"); ok {
		return rev, r.source.Check(ctx, child, rev)
	}
	to, _, _ := unstructured.NestedString(wr.Object, "spec", "to")
	t, err := time.Parse(time.RFC3339, to)
	if err != nil {
		return 0, &restore.Refused{Reason: fmt.Sprintf("spec.to %q is not a time (RFC 3339): %v", to, err)}
	}
	if t.After(r.now()) {
		return 0, &restore.Refused{Reason: fmt.Sprintf("spec.to %s is in the future", to)}
	}
	rev, ok, err := r.source.RevisionAt(ctx, t)
	if err != nil {
		return 0, err
	}
	if !ok {
		earliest, why, err := r.source.Earliest(ctx, child)
		if err != nil {
			return 0, err
		}
		return 0, &restore.Refused{Reason: fmt.Sprintf("cannot restore %s to %s: %s", child, to, why), Earliest: earliest, EarliestTime: r.source.TimeOf(ctx, earliest)}
	}
	return rev, r.source.Check(ctx, child, rev)
}

// readyWorkspace refuses a Workspace of parent that is missing or not Ready.
func (r *reconciler) readyWorkspace(ctx context.Context, parent logicalcluster.Name, name string) error {
	d, err := r.clients.Dynamic(parent)
	if err != nil {
		return err
	}
	ws, err := d.Resource(tenancy.WorkspacesResource).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &restore.Refused{Reason: fmt.Sprintf("there is no Workspace %s in %s", name, parent)}
	}
	if err != nil {
		return err
	}
	if p, _, _ := unstructured.NestedString(ws.Object, "status", "phase"); p != tenancy.PhaseReady {
		return &restore.Refused{Reason: fmt.Sprintf("Workspace %s in %s is %s, not Ready", name, parent, p)}
	}
	return nil
}

// findSnapshot is the stored snapshot name (id, or the newest) filed under
// parent: a restore reads only its own parent's snapshots.
func (r *reconciler) findSnapshot(ctx context.Context, parent logicalcluster.Name, name string, id int64) (*snapshots.Snapshot, error) {
	list, err := snapshots.List(ctx, r.source.DB, r.source.Dialect, string(parent), name)
	if err != nil {
		return nil, err
	}
	for _, s := range list {
		if id == 0 || s.ID == id {
			return &s, nil
		}
	}
	if id != 0 {
		return nil, &restore.Refused{Reason: fmt.Sprintf("there is no snapshot %d of WorkspaceSnapshot %s in %s", id, name, parent)}
	}
	return nil, &restore.Refused{Reason: fmt.Sprintf("there is no snapshot of WorkspaceSnapshot %s in %s", name, parent)}
}

// failOrRetry ends the restore on a refusal; other errors are retried.
func (r *reconciler) failOrRetry(ctx context.Context, parent logicalcluster.Name, wr *unstructured.Unstructured, target logicalcluster.Name, err error) error {
	if restore.IsRefused(err) {
		return r.fail(ctx, parent, wr, target, err)
	}
	return err
}

// run plans and writes until nothing is left to write (or passes ran out).
func (r *reconciler) run(ctx context.Context, parent logicalcluster.Name, wr *unstructured.Unstructured, child logicalcluster.Name, rev int64, planner func(context.Context) (*restore.Plan, error)) (int, []restore.Change, error) {
	written := 0
	// Each key is written back once. A key whose write found it changed
	// meanwhile is planned again; a key already written may change after
	// (a syncer reports the status of what the restore brought back, kcp's
	// controllers react): that is the world moving on, not left work.
	var pending map[string]bool
	var remaining []restore.Change
	for pass := 0; pass < passes; pass++ {
		plan, err := planner(ctx)
		if err != nil {
			return written, nil, err
		}
		if _, described, _ := unstructured.NestedFieldNoCopy(wr.Object, "status", "summary"); !described {
			describe(wr, plan)
		}
		if pending != nil {
			kept := plan.Changes[:0]
			for _, ch := range plan.Changes {
				if pending[ch.Key] {
					kept = append(kept, ch)
				}
			}
			plan.Changes = kept
		}
		if len(plan.Changes) == 0 {
			return written, nil, nil
		}
		msg := fmt.Sprintf("restoring %s to revision %d: %d writes (pass %d)", child, rev, len(plan.Changes), pass+1)
		if p, ok := r.writer.(*restore.PacedWriter); ok {
			// Why a restore takes the time it takes: the server's bound,
			// shared by the restores running at once.
			msg += fmt.Sprintf(", at most %g writes a second (the server's --restore-writes-per-second)", p.PerSecond)
		}
		setPhase(wr, tenancy.RestoreRunning, msg)
		last := time.Time{}
		progress := func(done, total int) {
			_ = unstructured.SetNestedField(wr.Object, int64(done), "status", "progress", "done")
			_ = unstructured.SetNestedField(wr.Object, int64(total), "status", "progress", "total")
			if done == total || r.now().Sub(last) >= time.Second {
				last = r.now()
				if err := r.updateStatus(ctx, parent, wr); err != nil {
					klog.V(2).InfoS("Restore progress not written", "restore", wr.GetName(), "err", err)
				}
			}
		}
		progress(0, len(plan.Changes))
		n, moved, err := restore.Apply(ctx, r.writer, plan, progress)
		written += n
		if err != nil {
			return written, nil, err
		}
		if len(moved) == 0 {
			return written, nil, nil
		}
		pending, remaining = map[string]bool{}, moved
		for _, ch := range moved {
			pending[ch.Key] = true
		}
	}
	return written, remaining, nil
}

func (r *reconciler) fail(ctx context.Context, parent logicalcluster.Name, wr *unstructured.Unstructured, child logicalcluster.Name, err error) error {
	var refused *restore.Refused
	if errors.As(err, &refused) && refused.Earliest > 0 {
		_ = unstructured.SetNestedField(wr.Object, refused.Earliest, "status", "earliest", "revision")
		if !refused.EarliestTime.IsZero() {
			_ = unstructured.SetNestedField(wr.Object, refused.EarliestTime.UTC().Format(time.RFC3339), "status", "earliest", "time")
		}
	}
	setPhase(wr, tenancy.RestoreFailed, err.Error())
	_ = unstructured.SetNestedField(wr.Object, r.now().UTC().Format(time.RFC3339), "status", "completedAt")
	if err := r.release(ctx, wr, child); err != nil {
		return err
	}
	return r.updateStatus(ctx, parent, wr)
}

// release unfreezes c if this restore froze it.
func (r *reconciler) release(ctx context.Context, wr *unstructured.Unstructured, c logicalcluster.Name) error {
	if lc, err := r.logicalCluster(ctx, c); err == nil && lc.GetAnnotations()[tenancy.RestoreAnnotation] == wr.GetName() {
		return r.setHolder(ctx, c, "")
	}
	return nil
}

func (r *reconciler) logicalCluster(ctx context.Context, c logicalcluster.Name) (*unstructured.Unstructured, error) {
	d, err := r.clients.Dynamic(c)
	if err != nil {
		return nil, err
	}
	return d.Resource(tenancy.LogicalClustersResource).Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
}

// setHolder sets (or, with "", removes) the restore annotation that
// freezes the child.
func (r *reconciler) setHolder(ctx context.Context, c logicalcluster.Name, holder string) error {
	d, err := r.clients.Dynamic(c)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		lc, err := d.Resource(tenancy.LogicalClustersResource).Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a := lc.GetAnnotations()
		if a[tenancy.RestoreAnnotation] == holder {
			return nil
		}
		if a == nil {
			a = map[string]string{}
		}
		if holder == "" {
			delete(a, tenancy.RestoreAnnotation)
		} else {
			a[tenancy.RestoreAnnotation] = holder
		}
		lc.SetAnnotations(a)
		_, err = d.Resource(tenancy.LogicalClustersResource).Update(ctx, lc, updateOptions)
		if err == nil || !apierrors.IsConflict(err) || attempt == 5 {
			return err
		}
	}
}

// waitFrozen waits until this server refuses the tenants' writes.
func (r *reconciler) waitFrozen(ctx context.Context, c logicalcluster.Name) error {
	if r.frozen == nil {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := r.frozen(c); ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become frozen within 30 s", c)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *reconciler) updateStatus(ctx context.Context, parent logicalcluster.Name, wr *unstructured.Unstructured) error {
	return r.clients.UpdateStatus(ctx, parent, tenancy.WorkspaceRestoresResource, wr)
}

func setPhase(wr *unstructured.Unstructured, phase, message string) {
	_ = unstructured.SetNestedField(wr.Object, phase, "status", "phase")
	_ = unstructured.SetNestedField(wr.Object, message, "status", "message")
}

// describe writes a plan's counts and first changes into the status.
func describe(wr *unstructured.Unstructured, plan *restore.Plan) {
	type counts struct{ create, update, delete int64 }
	per := map[string]*counts{}
	var total counts
	var changes []interface{}
	for _, ch := range plan.Changes {
		k := restore.ParseKey(ch.Key)
		gr := k.GroupResource()
		c := per[gr]
		if c == nil {
			c = &counts{}
			per[gr] = c
		}
		for _, cc := range []*counts{c, &total} {
			switch ch.Action {
			case restore.Create:
				cc.create++
			case restore.Update:
				cc.update++
			case restore.Delete:
				cc.delete++
			}
		}
		if len(changes) < listed {
			item := map[string]interface{}{"action": string(ch.Action), "resource": gr, "name": k.Name, "workspace": restore.ClusterOfKey(ch.Key)}
			if k.Namespace != "" {
				item["namespace"] = k.Namespace
			}
			changes = append(changes, item)
		}
	}
	names := make([]string, 0, len(per))
	for gr := range per {
		names = append(names, gr)
	}
	sort.Strings(names)
	resources := make([]interface{}, 0, len(names))
	for _, gr := range names {
		c := per[gr]
		resources = append(resources, map[string]interface{}{"resource": gr, "create": c.create, "update": c.update, "delete": c.delete})
	}
	_ = unstructured.SetNestedField(wr.Object, map[string]interface{}{
		"total": int64(len(plan.Changes)), "create": total.create, "update": total.update, "delete": total.delete,
	}, "status", "summary")
	_ = unstructured.SetNestedSlice(wr.Object, resources, "status", "resources")
	_ = unstructured.SetNestedSlice(wr.Object, changes, "status", "changes")
}
