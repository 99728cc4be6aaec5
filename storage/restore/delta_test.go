package restore

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// A move's delta copy: what changed in a cluster after a settled revision
// (writes, deletions, nothing of another cluster), applied to a copy made
// at that revision, makes the copy equal to the source; once kine compacts
// past the revision, a deletion could be gone from the log, and Changed
// refuses (the move then compares whole states).
func TestChangedSince(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dialect := datastore.SQLite
			if d.Name == "postgres" {
				dialect = datastore.Postgres
			}
			srcKine, srcDB := kinetest.StartCompactingOnRequestWithDB(t, d.DSN(t))
			dstKine, dstDB := kinetest.StartCompactingOnRequestWithDB(t, d.DSN(t))
			src, dst := Source{DB: srcDB, Dialect: dialect}, Source{DB: dstDB, Dialect: dialect}
			const c = logicalcluster.Name("root:mover")
			key := func(cluster logicalcluster.Name, name string) string {
				return fmt.Sprintf("/registry/core/configmaps/%s/default/%s", cluster, name)
			}
			value := func(name, v string) []byte {
				return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"uid-%s"},"data":{"v":%q}}`, name, name, v))
			}
			must := func(ok bool, err error) {
				t.Helper()
				if err != nil || !ok {
					t.Fatalf("write: %v, %v", ok, err)
				}
			}
			for _, n := range []string{"keep", "change", "drop"} {
				must(srcKine.CreateRow(ctx, key(c, n), value(n, "1")))
			}
			must(srcKine.CreateRow(ctx, key("root:other", "x"), value("x", "1")))

			// The copy as of a settled revision.
			since, err := srcKine.Settle(ctx)
			if err != nil {
				t.Fatal(err)
			}
			lives, err := src.Live(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := dst.PlanInto(ctx, Values(lives), c, c)
			if err != nil {
				t.Fatal(err)
			}
			if n, _, err := Apply(ctx, dstKine, plan, nil); err != nil || n != 3 {
				t.Fatalf("the first copy wrote %d: %v", n, err)
			}

			// Changes after it, and writes of another cluster.
			_, rev, _ := srcKine.GetKey(ctx, key(c, "change"))
			must(srcKine.UpdateRow(ctx, key(c, "change"), value("change", "2"), rev))
			_, rev, _ = srcKine.GetKey(ctx, key(c, "drop"))
			must(srcKine.DeleteRow(ctx, key(c, "drop"), rev))
			must(srcKine.CreateRow(ctx, key(c, "new"), value("new", "1")))
			must(srcKine.CreateRow(ctx, key(c, "gone-again"), value("gone-again", "1")))
			_, rev, _ = srcKine.GetKey(ctx, key(c, "gone-again"))
			must(srcKine.DeleteRow(ctx, key(c, "gone-again"), rev))
			must(srcKine.CreateRow(ctx, key("root:other", "y"), value("y", "1")))

			delta, err := src.Changed(ctx, c, since)
			if err != nil {
				t.Fatal(err)
			}
			var changed []string
			for k := range delta.Changed {
				changed = append(changed, k)
			}
			sort.Strings(changed)
			if want := []string{key(c, "change"), key(c, "new")}; !reflect.DeepEqual(changed, want) {
				t.Errorf("changed since %d: %v, want %v", since, changed, want)
			}
			if want := []string{key(c, "drop"), key(c, "gone-again")}; !reflect.DeepEqual(delta.Deleted, want) {
				t.Errorf("deleted since %d: %v, want %v", since, delta.Deleted, want)
			}
			plan, err = dst.PlanDelta(ctx, c, delta)
			if err != nil {
				t.Fatal(err)
			}
			if n, moved, err := Apply(ctx, dstKine, plan, nil); err != nil || len(moved) != 0 || n != 3 {
				t.Fatalf("the delta wrote %d (want 3: an update, a create, a delete), moved %v: %v", n, moved, err)
			}
			srcLive, err := src.Live(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			dstLive, err := dst.Live(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(Values(srcLive), Values(dstLive)) {
				t.Errorf("after the delta the copy differs:\nsource %q\ncopy   %q", Values(srcLive), Values(dstLive))
			}

			// Compacted past since: a deletion may be gone; refused.
			latest, err := srcKine.Settle(ctx)
			if err != nil || latest <= since {
				t.Fatalf("settle after the writes: %d (before %d), %v", latest, since, err)
			}
			cl := srcKine.Client()
			defer cl.Close()
			if _, err := cl.Compact(ctx, latest); err != nil {
				t.Fatal(err)
			}
			if _, err := src.Changed(ctx, c, since); !IsCompactedSince(err) {
				t.Errorf("Changed after a compaction past %d: %v, want ErrCompactedSince", since, err)
			}
			if _, err := src.Changed(ctx, c, latest); err != nil {
				t.Errorf("Changed since the compacted revision itself: %v", err)
			}
		})
	}
}
