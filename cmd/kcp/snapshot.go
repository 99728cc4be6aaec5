package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/snapshots"
	"github.com/kcpsql/kcp/storage/sqlreports"
)

func newSnapshotCommand() *cobra.Command {
	rootDir, ds, file := ".kcp", "", ""
	timeout := 10 * time.Minute
	cmd := &cobra.Command{
		Use:   "snapshot WORKSPACE -o FILE",
		Short: "Write a consistent snapshot of one workspace to a file",
		Long: `Snapshot reads every object of one workspace at one revision straight from
the datastore (SQLite file or PostgreSQL; read-only, also while kcp runs on
it) and writes them, as stored, to a file that 'kcp restore --from' loads
into a workspace of any kcp, on either dialect. The workspace's child
workspaces are not in it (snapshot each). Secrets are in the file as
stored: keep it safe.

For snapshots on a schedule, kept in the datastore, create a
WorkspaceSnapshot in the workspace's parent (docs/operations.md).`,
		Example: `  kcp snapshot root:team-a -o team-a.snap
  kcp snapshot root:team-a -o team-a.snap --datastore postgres://kcp@db:5432/kcp
  kcp restore --from team-a.snap --into root:team-a-copy`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := logicalcluster.Parse(args[0])
			if err != nil || c.IsWildcard() {
				return fmt.Errorf("WORKSPACE %q: give a workspace path like root:team-a", args[0])
			}
			if file == "" {
				return fmt.Errorf("give the file to write with -o FILE")
			}
			abs, err := filepath.Abs(rootDir)
			if err != nil {
				return err
			}
			d, err := datastore.Parse(ds, abs)
			if err != nil {
				return err
			}
			db, err := sqlreports.OpenReadOnly(d)
			if err != nil {
				return fmt.Errorf("datastore %s: %v", d, err)
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			snap, err := snapshots.Read(ctx, db, d.Dialect, c)
			if err != nil {
				return fmt.Errorf("datastore %s: %v", d, err)
			}
			tmp := file + ".partial"
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			if err := json.NewEncoder(f).Encode(snap); err != nil {
				f.Close()
				os.Remove(tmp)
				return err
			}
			if err := f.Close(); err != nil {
				os.Remove(tmp)
				return err
			}
			if err := os.Rename(tmp, file); err != nil {
				return err
			}
			info, _ := os.Stat(file)
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d objects of %s at revision %d (%d bytes)\n", file, len(snap.Rows), c, snap.Revision, info.Size())
			return nil
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", rootDir, "kcp's state directory; the default SQLite file is <root-dir>/kcp.db")
	cmd.Flags().StringVar(&ds, "datastore", ds, "sqlite:///path/file.db or postgres://user@host:5432/dbname (default: <root-dir>/kcp.db)")
	cmd.Flags().StringVarP(&file, "output", "o", file, "the snapshot file to write (mode 0600)")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "give up after this long")
	return cmd
}
