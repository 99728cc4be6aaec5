package snapshots_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/snapshots"
)

// TestTakeInPages takes a snapshot (on SQLite a page at a time, on
// PostgreSQL in one transaction) while the workspace is being written, on
// both dialects: the snapshot holds exactly the
// workspace as of its revision (every key at its newest value up to that
// revision, nothing of other workspaces), unfinished snapshots are never
// listed and are cleaned up, and deleting one a page at a time leaves no
// row behind.
func TestTakeInPages(t *testing.T) {
	defer func(n int) { snapshots.PageRows = n }(snapshots.PageRows)
	snapshots.PageRows = 97
	for _, dialect := range datastoretest.Dialects {
		t.Run(dialect.Name, func(t *testing.T) {
			dsn := dialect.DSN(t)
			k := kinetest.Start(t, dsn)
			ds, err := datastore.Parse(dsn, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			db, err := ds.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			c := logicalcluster.Name("root:team-a")
			key := func(cluster string, i int) string {
				return fmt.Sprintf("/registry/core/configmaps/%s/apps/cm-%04d", cluster, i)
			}
			value := func(i, v int) []byte {
				return []byte(fmt.Sprintf(`{"kind":"ConfigMap","data":{"i":"%d","v":"%d"}}`, i, v))
			}
			const n = 450
			revs := make([]int64, n)
			for i := range n {
				if revs[i], _, err = k.CreateKey(ctx, key(string(c), i), value(i, 0)); err != nil {
					t.Fatal(err)
				}
				if _, _, err := k.CreateKey(ctx, key("root:team-b", i), value(i, 0)); err != nil {
					t.Fatal(err)
				}
			}

			// Writes go on while the snapshot is taken; each is recorded
			// with its revision.
			type write struct {
				i, v int
				rev  int64
			}
			var mu sync.Mutex
			var writes []write
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for v := 1; ; v++ {
					select {
					case <-stop:
						return
					default:
					}
					i := (v * 37) % n
					mu.Lock()
					prev := revs[i]
					mu.Unlock()
					rev, ok, err := k.UpdateKey(ctx, key(string(c), i), value(i, v), prev)
					if err != nil || !ok {
						t.Errorf("update %d: %v %v", i, ok, err)
						return
					}
					mu.Lock()
					revs[i] = rev
					writes = append(writes, write{i, v, rev})
					mu.Unlock()
				}
			}()
			s, err := snapshots.Take(ctx, db, ds.Dialect, k.Background, c, "root", "nightly")
			close(stop)
			<-done
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for i := range n {
				want[key(string(c), i)] = string(value(i, 0))
			}
			mu.Lock()
			for _, w := range writes {
				if w.rev <= s.Revision {
					want[key(string(c), w.i)] = string(value(w.i, w.v))
				}
			}
			t.Logf("%d writes while the snapshot was taken", len(writes))
			mu.Unlock()
			rows, err := snapshots.Rows(ctx, db, ds.Dialect, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if s.Objects != n || len(rows) != n {
				t.Fatalf("snapshot of %d objects with %d rows, want %d", s.Objects, len(rows), n)
			}
			for k, v := range want {
				if string(rows[k]) != v {
					t.Fatalf("%s in the snapshot at revision %d: %s, want %s", k, s.Revision, rows[k], v)
				}
			}

			// An unfinished snapshot (a process stopped while taking it) is
			// not listed and is cleaned up with its rows.
			if _, err := db.ExecContext(ctx, rebind(ds.Dialect, `INSERT INTO kcp_snapshots (id, parent, name, cluster, revision, objects) VALUES (?, 'root', 'nightly', 'root:team-a', 1, -1)`), s.ID+100); err != nil {
				t.Fatal(err)
			}
			for i := range 250 {
				if _, err := db.ExecContext(ctx, rebind(ds.Dialect, `INSERT INTO kcp_snapshot_rows (snapshot_id, key, value) VALUES (?, ?, ?)`), s.ID+100, key(string(c), i), []byte("{}")); err != nil {
					t.Fatal(err)
				}
			}
			list, err := snapshots.List(ctx, db, ds.Dialect, "root", "nightly")
			if err != nil || len(list) != 1 || list[0].ID != s.ID {
				t.Fatalf("listed %+v (%v), want only snapshot %d", list, err, s.ID)
			}
			if err := snapshots.DeleteUnfinished(ctx, db, ds.Dialect, k.Background, "root", "nightly"); err != nil {
				t.Fatal(err)
			}
			count := func(q string, args ...any) int {
				var n int
				if err := db.QueryRowContext(ctx, rebind(ds.Dialect, q), args...).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if got := count(`SELECT COUNT(*) FROM kcp_snapshot_rows WHERE snapshot_id = ?`, s.ID+100); got != 0 {
				t.Errorf("%d rows of the unfinished snapshot left", got)
			}
			if got := count(`SELECT COUNT(*) FROM kcp_snapshot_rows WHERE snapshot_id = ?`, s.ID); got != n {
				t.Errorf("the finished snapshot has %d rows after cleaning up, want %d", got, n)
			}

			if err := snapshots.Delete(ctx, db, ds.Dialect, k.Background, s.ID); err != nil {
				t.Fatal(err)
			}
			if got := count(`SELECT COUNT(*) FROM kcp_snapshot_rows`) + count(`SELECT COUNT(*) FROM kcp_snapshots`); got != 0 {
				t.Errorf("%d snapshot rows left after deleting", got)
			}
		})
	}
}

func rebind(d datastore.Dialect, q string) string {
	if d != datastore.Postgres {
		return q
	}
	out := []byte{}
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = append(out, fmt.Sprintf("$%d", n)...)
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}
