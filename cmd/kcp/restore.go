package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/snapshots"
)

type restoreOptions struct {
	transferOptions
	from      string
	snapshot  string
	rootDir   string
	datastore string
	to        string
	revision  int64
	dryRun    bool
	name      string
	into      string
	wait      bool
	timeout   time.Duration
}

func newRestoreCommand() *cobra.Command {
	o := &restoreOptions{}
	cmd := &cobra.Command{
		Use:   "restore (WORKSPACE (--to TIME | --revision N | --snapshot NAME[:ID]) | --from FILE --into WORKSPACE) [--dry-run]",
		Short: "Bring a workspace back to its state at an earlier time, from the change history",
		Long: `Restore brings one workspace back to how it was at a time or a revision:
objects changed since are written back, objects created since are deleted,
objects deleted since (namespaces, CRDs with their objects, secrets, RBAC,
bound APIs' objects) come back. Other workspaces are not touched; child
workspaces are left as they are. It needs the change history
(kcp start --change-history) to cover the time since that point.

The restore is a set of ordinary writes: resourceVersions move forward and
watches see the changes as events, so controllers, placement and syncers
react as to any change. The workspace is frozen (read-only for everyone but
kcp) while it runs; a restore that stops half way keeps it frozen and goes on
when kcp runs again. The server bounds how fast restores write (kcp start
--restore-writes-per-second, default 500 objects a second), so that other
tenants keep their latency; the progress shows how far it is.

This command is a client of the API: it creates a WorkspaceRestore in the
workspace's parent (you need to be allowed to create workspacerestores
there) and follows its status. --dry-run lists what would change and writes
nothing.

Snapshots: --snapshot restores from one kept by a WorkspaceSnapshot in the
parent; --from loads a file written by 'kcp snapshot' (this needs the
datastore, like 'kcp sql') and restores it into the workspace --into.`,
		Example: `  kcp restore root:team-a --to 2026-11-28T10:41:00Z --dry-run
  kcp restore root:team-a --to 2026-11-28T10:41:00Z
  kcp restore root:team-a --to 15m        # as it was 15 minutes ago
  kcp restore root:team-a --to 2026-11-28T10:41:00Z --into root:team-a-restored
  kcp restore root:org --to 2026-11-28T10:41:00Z --recursive   # and every workspace below it
  kcp restore root:team-a --snapshot nightly           # the newest snapshot of WorkspaceSnapshot nightly
  kcp restore --from team-a.snap --into root:team-a-copy --datastore postgres://kcp@db:5432/kcp
  kcp restore root:team-a --revision 48213`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			workspace := ""
			if len(args) == 1 {
				workspace = args[0]
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), workspace)
		},
	}
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the server (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&o.to, "to", "", "the point to restore to: a time (RFC 3339, like 2026-11-28T10:41:00Z) or a duration ago (like 15m, 2h)")
	cmd.Flags().Int64Var(&o.revision, "revision", 0, "the point to restore to, as a revision (a resourceVersion of the datastore)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "only list what the restore would change")
	cmd.Flags().BoolVar(&o.recursive, "recursive", false, "restore the workspaces below it too, each to the same point (in place, from the change history); workspaces created after that point are left as they are")
	cmd.Flags().StringVar(&o.snapshot, "snapshot", "", "restore from a snapshot of the workspace's WorkspaceSnapshot of this name (the newest, or NAME:ID) instead of the change history")
	cmd.Flags().StringVar(&o.from, "from", "", "restore from a snapshot file (kcp snapshot -o FILE) into the workspace --into; loads the file through the datastore (--root-dir, --datastore), so it runs where the datastore is reachable")
	cmd.Flags().StringVar(&o.rootDir, "root-dir", ".kcp", "with --from: kcp's state directory; the default SQLite file is <root-dir>/kcp.db")
	cmd.Flags().StringVar(&o.datastore, "datastore", "", "with --from: sqlite:///path/file.db or postgres://user@host:5432/dbname (default: <root-dir>/kcp.db)")
	cmd.Flags().StringVar(&o.into, "into", "", "restore side by side into this workspace of the same parent (created, with the same type, if missing); its objects are replaced")
	cmd.Flags().StringVar(&o.name, "name", "", "name of the WorkspaceRestore to create (default: the workspace's name and a random suffix)")
	cmd.Flags().BoolVar(&o.wait, "wait", true, "follow the restore until it ends (false: create it and return)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", time.Hour, "how long to follow the restore")
	return cmd
}

// restoreTarget turns --to into a time: RFC 3339, or a duration ago.
func restoreTarget(to string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, to); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(to, "-")); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--to %q is neither a time (RFC 3339, like 2026-11-28T10:41:00Z) nor a duration ago (like 15m)", to)
}

func (o *restoreOptions) run(ctx context.Context, out io.Writer, workspace string) error {
	if o.from != "" {
		if workspace != "" || o.into == "" {
			return fmt.Errorf("with --from, name the workspace to write with --into PATH (created if missing), and no WORKSPACE")
		}
		return o.runFrom(ctx, out)
	}
	if workspace == "" {
		return fmt.Errorf("give the WORKSPACE to restore, like root:team-a")
	}
	path, err := logicalcluster.Parse(workspace)
	if err != nil || path.IsWildcard() {
		return fmt.Errorf("WORKSPACE %q: give a workspace path like root:team-a", workspace)
	}
	i := strings.LastIndexByte(string(path), ':')
	if i < 0 {
		return fmt.Errorf("%s has no parent: only a workspace below root can be restored", path)
	}
	parent, name := string(path)[:i], string(path)[i+1:]
	given := 0
	for _, set := range []bool{o.to != "", o.revision != 0, o.snapshot != ""} {
		if set {
			given++
		}
	}
	if given != 1 {
		return fmt.Errorf("give exactly one of --to, --revision and --snapshot")
	}
	if o.recursive && (o.into != "" || o.snapshot != "") {
		return fmt.Errorf("--recursive restores in place from the change history: it cannot be combined with --into or --snapshot")
	}
	spec := map[string]interface{}{"workspace": name}
	if o.into != "" {
		into, err := logicalcluster.Parse(o.into)
		j := strings.LastIndexByte(string(into), ':')
		if err != nil || j < 0 || string(into)[:j] != parent {
			return fmt.Errorf("--into %q: give a workspace path of the same parent, like %s:%s-restored", o.into, parent, name)
		}
		spec["into"] = string(into)[j+1:]
	}
	if o.dryRun {
		spec["dryRun"] = true
	}
	if o.recursive {
		spec["recursive"] = true
	}
	switch {
	case o.to != "":
		t, err := restoreTarget(o.to, time.Now())
		if err != nil {
			return err
		}
		spec["to"] = t.UTC().Format(time.RFC3339)
	case o.revision != 0:
		spec["revision"] = o.revision
	default:
		snap := map[string]interface{}{"name": o.snapshot}
		if n, id, ok := strings.Cut(o.snapshot, ":"); ok {
			v, err := strconv.ParseInt(id, 10, 64)
			if err != nil || v < 1 {
				return fmt.Errorf("--snapshot %q: give NAME or NAME:ID (an id from the WorkspaceSnapshot's status)", o.snapshot)
			}
			snap = map[string]interface{}{"name": n, "id": v}
		}
		spec["snapshot"] = snap
	}
	return o.create(ctx, out, parent, name, spec)
}

// runFrom loads a snapshot file into the datastore, filed under the
// target's parent, restores the target from it and deletes it again.
func (o *restoreOptions) runFrom(ctx context.Context, out io.Writer) error {
	into, err := logicalcluster.Parse(o.into)
	j := strings.LastIndexByte(string(into), ':')
	if err != nil || into.IsWildcard() || j < 0 {
		return fmt.Errorf("--into %q: give a workspace path below root, like root:team-a-copy", o.into)
	}
	parent, name := string(into)[:j], string(into)[j+1:]
	raw, err := os.ReadFile(o.from)
	if err != nil {
		return err
	}
	var file snapshots.File
	if err := json.Unmarshal(raw, &file); err != nil {
		return fmt.Errorf("%s: not a snapshot file: %v", o.from, err)
	}
	if err := file.Check(); err != nil {
		return fmt.Errorf("%s: %v", o.from, err)
	}
	abs, err := filepath.Abs(o.rootDir)
	if err != nil {
		return err
	}
	ds, err := datastore.Parse(o.datastore, abs)
	if err != nil {
		return err
	}
	db, err := ds.Open()
	if err != nil {
		return fmt.Errorf("datastore %s: %v", ds, err)
	}
	defer db.Close()
	snap, err := snapshots.Load(ctx, db, ds.Dialect, &file, parent, snapshots.FilePrefix+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		return fmt.Errorf("loading %s into %s: %v", o.from, ds, err)
	}
	defer snapshots.Delete(context.Background(), db, ds.Dialect, nil, snap.ID)
	fmt.Fprintf(out, "loaded %s: %d objects of %s at revision %d of its datastore\n", o.from, snap.Objects, file.Cluster, file.Revision)
	spec := map[string]interface{}{"workspace": name, "snapshot": map[string]interface{}{"name": snap.Name, "id": snap.ID}}
	if o.dryRun {
		spec["dryRun"] = true
	}
	cfg, err := o.config(logicalcluster.Name(parent))
	if err != nil {
		return err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if !o.dryRun {
		if err := ensureWorkspace(ctx, out, d, parent, "", name); err != nil {
			return err
		}
	}
	o.into = ""
	return o.create(ctx, out, parent, name, spec)
}

// create creates the WorkspaceRestore in parent and follows it.
func (o *restoreOptions) create(ctx context.Context, out io.Writer, parent, name string, spec map[string]interface{}) error {
	meta := map[string]interface{}{"name": o.name}
	if o.name == "" {
		prefix := name + "-"
		if o.dryRun {
			prefix += "dry-run-"
		}
		meta = map[string]interface{}{"generateName": prefix}
	}
	cfg, err := o.config(logicalcluster.Name(parent))
	if err != nil {
		return err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if into, ok := spec["into"].(string); ok && !o.dryRun {
		if err := ensureWorkspace(ctx, out, d, parent, name, into); err != nil {
			return err
		}
	}
	restores := d.Resource(tenancy.WorkspaceRestoresResource)
	wr := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": tenancy.Group + "/" + tenancy.Version,
		"kind":       "WorkspaceRestore",
		"metadata":   meta,
		"spec":       spec,
	}}
	created, err := restores.Create(ctx, wr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a WorkspaceRestore in %s: %w", parent, err)
	}
	o.name = created.GetName()
	fmt.Fprintf(out, "WorkspaceRestore %s created in %s\n", o.name, parent)
	if !o.wait {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	last := ""
	rv := created.GetResourceVersion()
	for {
		got, err := restores.Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("following WorkspaceRestore %s in %s: %w", o.name, parent, err)
		}
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
		done, _, _ := unstructured.NestedInt64(got.Object, "status", "progress", "done")
		total, _, _ := unstructured.NestedInt64(got.Object, "status", "progress", "total")
		line := phase + ": " + msg
		if phase == tenancy.RestoreRunning && total > 0 {
			line = fmt.Sprintf("%s (%d/%d)", line, done, total)
		}
		if phase != "" && line != last {
			fmt.Fprintf(out, "%s  %s\n", time.Now().Format("15:04:05"), line)
			last = line
		}
		switch phase {
		case tenancy.RestoreSucceeded:
			printRestoreSummary(out, got)
			return nil
		case tenancy.RestoreFailed:
			if t, ok, _ := unstructured.NestedString(got.Object, "status", "earliest", "time"); ok {
				return fmt.Errorf("restore failed: %s (earliest point: %s)", msg, t)
			}
			return fmt.Errorf("restore failed: %s", msg)
		}
		w, err := restores.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + o.name, ResourceVersion: rv})
		if err != nil {
			return err
		}
		select {
		case ev, ok := <-w.ResultChan():
			if u, isU := ev.Object.(*unstructured.Unstructured); ok && isU {
				rv = u.GetResourceVersion()
			}
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			w.Stop()
			return fmt.Errorf("WorkspaceRestore %s in %s did not finish within %s (it goes on; see kubectl get workspacerestore %s)", o.name, parent, o.timeout, o.name)
		}
		w.Stop()
	}
}

func printRestoreSummary(out io.Writer, wr *unstructured.Unstructured) {
	resources, _, _ := unstructured.NestedSlice(wr.Object, "status", "resources")
	if len(resources) == 0 {
		fmt.Fprintln(out, "nothing to change")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tCREATE\tUPDATE\tDELETE")
	for _, r := range resources {
		m, _ := r.(map[string]interface{})
		fmt.Fprintf(tw, "%v\t%v\t%v\t%v\n", m["resource"], m["create"], m["update"], m["delete"])
	}
	tw.Flush()
	changes, _, _ := unstructured.NestedSlice(wr.Object, "status", "changes")
	if dry, _, _ := unstructured.NestedBool(wr.Object, "spec", "dryRun"); dry && len(changes) > 0 {
		fmt.Fprintln(out)
		recursive, _, _ := unstructured.NestedBool(wr.Object, "spec", "recursive")
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		header := "ACTION\tRESOURCE\tNAMESPACE\tNAME"
		if recursive {
			header += "\tWORKSPACE"
		}
		fmt.Fprintln(tw, header)
		for _, c := range changes {
			m, _ := c.(map[string]interface{})
			ns, _ := m["namespace"].(string)
			line := fmt.Sprintf("%v\t%v\t%s\t%v", m["action"], m["resource"], ns, m["name"])
			if recursive {
				line += fmt.Sprintf("\t%v", m["workspace"])
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
		if total, _, _ := unstructured.NestedInt64(wr.Object, "status", "summary", "total"); total > int64(len(changes)) {
			fmt.Fprintf(out, "(%d more not listed)\n", total-int64(len(changes)))
		}
	}
}

// ensureWorkspace creates Workspace into in parent (with the type of
// Workspace like) unless it exists, and waits until it is Ready.
func ensureWorkspace(ctx context.Context, out io.Writer, d dynamic.Interface, parent, like, into string) error {
	workspaces := d.Resource(tenancy.WorkspacesResource)
	if _, err := workspaces.Get(ctx, into, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		spec := map[string]interface{}{}
		if like != "" {
			source, err := workspaces.Get(ctx, like, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading Workspace %s in %s: %w", like, parent, err)
			}
			if t, ok, _ := unstructured.NestedString(source.Object, "spec", "type"); ok && t != "" {
				spec["type"] = t
			}
		}
		ws := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "Workspace",
			"metadata": map[string]interface{}{"name": into}, "spec": spec,
		}}
		if _, err := workspaces.Create(ctx, ws, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Workspace %s in %s: %w", into, parent, err)
		}
		fmt.Fprintf(out, "Workspace %s created in %s\n", into, parent)
	} else if err != nil {
		return fmt.Errorf("reading Workspace %s in %s: %w", into, parent, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ws, err := workspaces.Get(ctx, into, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p, _, _ := unstructured.NestedString(ws.Object, "status", "phase"); p == tenancy.PhaseReady {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Workspace %s in %s is not Ready after 2 minutes", into, parent)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
