package migrations_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"

	"github.com/kcpsql/kcp/migrations"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/keys"
)

// keysToCheck exercise the generated cluster column against keys.ClusterOf.
var keysToCheck = []string{
	"/registry/core/configmaps/root:a/ns/name",
	"/registry/core/namespaces/root/default",
	"/registry/core/namespaces/root",
	"/registry/rbac.authorization.k8s.io/clusterroles/root:acme:web/system:controller:x",
	"/registry/example.com/widgets/root:b/ns/w",
	"/registry/health",
	"/registry/core",
	"compact_rev_key",
	"/registry/core/configmaps//ns/name",
	"/a/b/c/d/e/f/g/h",
	// a resource bound from an APIExport: the resource carries the export's identity
	"/registry/example.com/widgets:0123456789abcdef0123/root:consumer/ns/w",
	"/registry/core/secrets/system:crds/kube-system/token",
	"/registry/example.com/Widgets_v2/root:x/y",
	"/registry/core/namespaces/root:" + strings.Repeat("a", 63) + ":b/default",
	"/registry/core/configmaps/root/ns/a\"b\\c%d é",
	"gap-12",
	"/registry/core/namespaces/",
	"//registry",
	"",
}

// dsns make a fresh datastore of each dialect.
var dsns = map[string]func(t *testing.T) string{
	"sqlite":   func(t *testing.T) string { return datastoretest.SQLiteDSN(t) },
	"postgres": func(t *testing.T) string { return datastoretest.PostgresDSN(t) },
}

// freshDatastore parses and prepares an empty datastore from dsn.
func freshDatastore(t *testing.T, dsn func(t *testing.T) string) *datastore.Datastore {
	t.Helper()
	ds, err := datastore.Parse(dsn(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestUpOnBothDialects(t *testing.T) {
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ds := freshDatastore(t, dsn)
			st, err := migrations.Version(ctx, ds)
			if err != nil || st.Version != 0 {
				t.Fatalf("fresh version = %+v, %v", st, err)
			}
			st, err = migrations.Up(ctx, ds)
			if err != nil || st.Version != st.Latest || st.Dirty || st.Latest < 2 {
				t.Fatalf("Up = %+v, %v", st, err)
			}
			// Up again is a no-op.
			if st2, err := migrations.Up(ctx, ds); err != nil || st2 != st {
				t.Fatalf("second Up = %+v, %v", st2, err)
			}
			var db *sql.DB
			ph := "?"
			if ds.Dialect == datastore.SQLite {
				db, err = sql.Open("sqlite3", ds.SQLiteDSN())
			} else {
				db, err = sql.Open("pgx", ds.URL.String())
				ph = "$1"
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// kine's insert names its columns; the generated column fills itself.
			for i, k := range keysToCheck {
				if _, err := db.Exec(`INSERT INTO kine (name, created, deleted, create_revision, prev_revision, lease, value, old_value) VALUES (`+ph+`, 1, 0, 0, 0, 0, NULL, NULL)`, k); err != nil {
					t.Fatalf("insert %d: %v", i, err)
				}
			}
			for _, k := range keysToCheck {
				var got string
				if err := db.QueryRow(`SELECT cluster FROM kine WHERE name = `+ph, k).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if want := keys.ClusterOf(k); got != want {
					t.Errorf("cluster column for %q = %q, want %q", k, got, want)
				}
			}
			// The index kine relies on for concurrent updates, and ours, exist.
			for _, idx := range []string{"kine_name_prev_revision_uindex", "kine_cluster_name_id_index"} {
				var n int
				q := `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ` + ph
				if ds.Dialect == datastore.Postgres {
					q = `SELECT count(*) FROM pg_indexes WHERE indexname = ` + ph
				}
				if err := db.QueryRow(q, idx).Scan(&n); err != nil || n != 1 {
					t.Errorf("index %s: %d %v", idx, n, err)
				}
			}
		})
	}
}

// TestPlacementViews: kcp_placements and kcp_workload_shares read where
// Deployments run from the JSON kcp stores, alike on both dialects: a
// divided Deployment's shares from its per-target status annotations, a
// Deployment on one target whole.
func TestPlacementViews(t *testing.T) {
	policy := func(targets string) string {
		return fmt.Sprintf(`{"mode":"Divide","targets":{%s}}`, targets)
	}
	status := func(share, available int) string {
		return fmt.Sprintf(`{"mode":"Divide","share":%d,"status":{"availableReplicas":%d}}`, share, available)
	}
	object := func(namespace, name string, annotations map[string]string, rest string) string {
		meta := map[string]any{"name": name, "annotations": annotations}
		if namespace != "" {
			meta["namespace"] = namespace
		}
		m, _ := json.Marshal(meta)
		return fmt.Sprintf(`{"metadata":%s%s}`, m, rest)
	}
	rows := map[string]string{
		"/registry/core/namespaces/root:a/shop": object("", "shop", map[string]string{
			"workload.kcp.io/sync-target": "root:compute/pc1,root:compute/pc2",
			"workload.kcp.io/placement":   policy(`"k1":{"name":"root:compute/pc1","weight":1},"k2":{"name":"root:compute/pc2","weight":2}`)}, ""),
		"/registry/apps/deployments/root:a/shop/web": object("shop", "web", map[string]string{
			"workload.kcp.io/status-k1": status(2, 2), "workload.kcp.io/status-k2": status(4, 3)}, `,"spec":{"replicas":6}`),
		"/registry/core/namespaces/root:b/shop": object("", "shop", map[string]string{
			"workload.kcp.io/sync-target": "root:compute/pc1",
			"workload.kcp.io/placement":   `{"mode":"Duplicate","targets":{"k1":{"name":"root:compute/pc1","weight":1}}}`}, ""),
		"/registry/apps/deployments/root:b/shop/web": object("shop", "web", nil, `,"spec":{"replicas":3},"status":{"availableReplicas":3}`),
		"/registry/core/namespaces/root:c/idle":      object("", "idle", nil, ""),
	}
	want := []string{
		"root:a shop web root:compute/pc1 2 2",
		"root:a shop web root:compute/pc2 4 3",
		"root:b shop web root:compute/pc1 3 3",
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			ds := freshDatastore(t, dsn)
			if _, err := migrations.Up(context.Background(), ds); err != nil {
				t.Fatal(err)
			}
			var db *sql.DB
			var err error
			insert := `INSERT INTO kine (name, created, deleted, create_revision, prev_revision, lease, value, old_value) VALUES (?, 1, 0, 0, 0, 0, ?, NULL)`
			if ds.Dialect == datastore.SQLite {
				db, err = sql.Open("sqlite3", ds.SQLiteDSN())
			} else {
				db, err = sql.Open("pgx", ds.URL.String())
				insert = `INSERT INTO kine (name, created, deleted, create_revision, prev_revision, lease, value, old_value) VALUES ($1, 1, 0, 0, 0, 0, $2, NULL)`
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for k, v := range rows {
				if _, err := db.Exec(insert, k, []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			var modes []string
			r, err := db.Query(`SELECT cluster, namespace, targets, mode FROM kcp_placements ORDER BY cluster`)
			if err != nil {
				t.Fatal(err)
			}
			for r.Next() {
				var c, ns, targets, mode string
				if err := r.Scan(&c, &ns, &targets, &mode); err != nil {
					t.Fatal(err)
				}
				modes = append(modes, c+" "+ns+" "+targets+" "+mode)
			}
			r.Close()
			if fmt.Sprint(modes) != "[root:a shop root:compute/pc1,root:compute/pc2 Divide root:b shop root:compute/pc1 Duplicate]" {
				t.Errorf("kcp_placements: %v", modes)
			}
			var got []string
			r, err = db.Query(`SELECT cluster, namespace, deployment, target, replicas, available FROM kcp_workload_shares ORDER BY cluster, target`)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for r.Next() {
				var c, ns, d, target string
				var replicas, available int
				if err := r.Scan(&c, &ns, &d, &target, &replicas, &available); err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%s %s %s %s %d %d", c, ns, d, target, replicas, available))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("kcp_workload_shares:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// TestDownUndoesUp: every down migration applies on both dialects and
// leaves none of the schema's tables, views or functions behind, and the
// schema migrates up again from there.
func TestDownUndoesUp(t *testing.T) {
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ds := freshDatastore(t, dsn)
			if _, err := migrations.Up(ctx, ds); err != nil {
				t.Fatal(err)
			}
			if err := migrations.Down(ctx, ds); err != nil {
				t.Fatalf("down: %v", err)
			}
			if st, err := migrations.Version(ctx, ds); err != nil || st.Version != 0 || st.Dirty {
				t.Fatalf("after down: %+v, %v", st, err)
			}
			db, err := ds.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			q := `SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND tbl_name <> '` + migrations.Table + `'`
			if ds.Dialect == datastore.Postgres {
				q = `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
					WHERE n.nspname = 'public' AND c.relname NOT LIKE '` + migrations.Table + `%'
					UNION ALL SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'`
			}
			rows, err := db.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					t.Fatal(err)
				}
				left = append(left, n)
			}
			rows.Close()
			if len(left) != 0 {
				t.Errorf("left behind by the down migrations: %v", left)
			}
			if st, err := migrations.Up(ctx, ds); err != nil || st.Version != st.Latest || st.Dirty {
				t.Fatalf("up again: %+v, %v", st, err)
			}
		})
	}
}
