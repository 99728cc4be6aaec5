package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

func openDatastore(t *testing.T, s *framework.Server) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if s.Datastore == "" {
		db, err = sql.Open("sqlite3", "file:"+filepath.Join(s.RootDir, "kcp.db")+"?mode=ro&_busy_timeout=5000")
	} else {
		db, err = sql.Open("pgx", s.Datastore)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestSQLShowsObjectsPerCluster runs the README's queries on both dialects.
func TestSQLShowsObjectsPerCluster(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		s.CreateWorkspaces("root:sql-a", "root:sql-b")
		for i, c := range []string{"root:sql-a", "root:sql-b"} {
			s.Kubectl(c, "create", "namespace", "shop")
			for j := 0; j <= i; j++ {
				s.Kubectl(c, "-n", "shop", "create", "configmap", fmt.Sprintf("cm-%d", j), "--from-literal=color=blue")
			}
		}
		s.Kubectl("root:sql-b", "-n", "shop", "delete", "configmap", "cm-0")
		db := openDatastore(t, s)
		footprint := func() map[string]int {
			rows, err := db.QueryContext(context.Background(), `SELECT cluster, objects, bytes FROM kcp_cluster_footprint ORDER BY cluster`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			got := map[string]int{}
			for rows.Next() {
				var c string
				var n, b int64
				if err := rows.Scan(&c, &n, &b); err != nil {
					t.Fatal(err)
				}
				if b <= 0 {
					t.Errorf("cluster %s has %d bytes", c, b)
				}
				got[c] = int(n)
			}
			return got
		}
		// A new workspace stores its LogicalCluster and the namespaces
		// default, kube-system and kube-public; then the shop namespace
		// and the live configmaps (a deleted one is not live). Each
		// namespace's default service account and kube-root-ca.crt, and
		// the owner's binding, are served, not stored: no rows (but the
		// API has them, checked below).
		framework.Eventually(t, 20*time.Second, "footprint root:sql-a=6 root:sql-b=6", func() (bool, string) {
			got := footprint()
			return got["root:sql-a"] == 6 && got["root:sql-b"] == 6 && got["root"] > 0, fmt.Sprint(got)
		})
		if out := s.Kubectl("root:sql-a", "get", "serviceaccounts,configmaps,clusterrolebindings", "-A", "-o", "name"); strings.Count(out, "serviceaccount/default") != 4 || strings.Count(out, "configmap/kube-root-ca.crt") != 4 || !strings.Contains(out, "clusterrolebinding.rbac.authorization.k8s.io/workspace-owner") {
			t.Errorf("the API does not serve every namespace's defaults:\n%s", out)
		}
		q := `SELECT namespace, name FROM kcp_objects WHERE cluster = 'root:sql-a' AND resource = 'configmaps' AND name LIKE 'cm-%'`
		var ns, name string
		if err := db.QueryRow(q).Scan(&ns, &name); err != nil || ns != "shop" || name != "cm-0" {
			t.Errorf("kcp_objects: %s/%s %v", ns, name, err)
		}
		// The object column is JSON that SQL can read.
		jq := `SELECT json_extract(object, '$.data.color') FROM kcp_objects WHERE cluster = 'root:sql-a' AND name = 'cm-0'`
		if s.Datastore != "" {
			jq = `SELECT object->'data'->>'color' FROM kcp_objects WHERE cluster = 'root:sql-a' AND name = 'cm-0'`
		}
		var color string
		if err := db.QueryRow(jq).Scan(&color); err != nil || color != "blue" {
			t.Errorf("JSON of the object: %q %v", color, err)
		}
	})
}

// TestMigrateCommand checks `kcp migrate` on a new file and its version output.
func TestMigrateCommand(t *testing.T) {
	kcp, _ := framework.Binaries(t)
	dir := t.TempDir()
	out, err := exec.Command(kcp, "migrate", "version", "--root-dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "schema version 0 of") {
		t.Fatalf("migrate version on an empty file: %v %s", err, out)
	}
	out, err = exec.Command(kcp, "migrate", "--root-dir", dir).CombinedOutput()
	var v, latest int
	if _, scanErr := fmt.Sscanf(string(out[strings.Index(string(out), "schema version"):]), "schema version %d of %d", &v, &latest); err != nil || scanErr != nil || v != latest || v < 3 {
		t.Fatalf("migrate up: %v %s", err, out)
	}
	out, err = exec.Command(kcp, "migrate", "sideways", "--root-dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown action") {
		t.Fatalf("migrate with a bad action: %v %s", err, out)
	}
	out, err = exec.Command(kcp, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "v1.37") {
		t.Fatalf("version: %v %s", err, out)
	}
}

// TestKcpSQL runs `kcp sql` reports and queries against a running server on
// both dialects, and checks that a write is refused and changes nothing.
func TestKcpSQL(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		kcp, _ := framework.Binaries(t)
		s.CreateWorkspaces("root:audit")
		s.Kubectl("root:audit", "-n", "default", "create", "configmap", "c1", "--from-literal=a=b")
		sqlArgs := func(args ...string) []string {
			base := []string{"sql", "--root-dir", s.RootDir}
			if s.Datastore != "" {
				base = append(base, "--datastore", s.Datastore)
			}
			return append(base, args...)
		}
		run := func(args ...string) (string, error) {
			out, err := exec.Command(kcp, sqlArgs(args...)...).CombinedOutput()
			return string(out), err
		}
		out, err := run("--report", "tenants")
		if err != nil || !strings.Contains(out, "root:audit") || !strings.Contains(out, "CLUSTER") {
			t.Errorf("tenants report: %v\n%s", err, out)
		}
		out, err = run("--report", "objects", "--cluster", "root:audit", "-o", "json")
		if err != nil || !strings.Contains(out, `"name": "c1"`) {
			t.Errorf("objects report: %v\n%s", err, out)
		}
		out, err = run("--report", "footprint", "--cluster", "root:audit", "-o", "csv")
		if err != nil || !strings.HasPrefix(out, "api_group,resource,objects,bytes\n") || !strings.Contains(out, "core,configmaps,") {
			t.Errorf("footprint report: %v\n%s", err, out)
		}
		out, err = run("SELECT COUNT(*) AS n FROM kcp_objects WHERE cluster = 'root:audit'")
		if err != nil || !strings.Contains(out, "(1 rows)") {
			t.Errorf("ad-hoc query: %v\n%s", err, out)
		}
		// Writes are refused and change nothing.
		// (Counted in a quiet cluster: the server itself keeps writing
		// leases in root.)
		const quiet = "SELECT COUNT(*) FROM kine WHERE cluster = 'root:audit'"
		before, _ := run(quiet)
		out, err = run("DELETE FROM kine")
		if err == nil || !strings.Contains(out, "only reads") {
			t.Errorf("a write through kcp sql: %v\n%s", err, out)
		}
		if after, _ := run(quiet); after != before {
			t.Errorf("kcp sql changed the table: %s -> %s", before, after)
		}
		// Bad input gets a clear message.
		for args, want := range map[string]string{
			"--report nope":                "unknown report",
			"--report footprint":           "needs --cluster",
			"--report tenants -o yaml":     "unknown output",
			"--report objects --cluster X": "must start with",
		} {
			out, err := run(strings.Fields(args)...)
			if err == nil || !strings.Contains(out, want) {
				t.Errorf("kcp sql %s: %v\n%s", args, err, out)
			}
		}
	})
}

// TestChangeHistory records changes past kine's compaction when switched on,
// answers "changes in cluster X since T" with one report, and prunes by age.
func TestChangeHistory(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			// A fast, tight compaction, so that the test sees kine drop history.
			s := framework.StartServer(t, framework.DatastoreFor(t, d), "--change-history", "--change-history-retention=40s",
				"--kine-compact-interval=2s", "--kine-compact-min-retain=1")
			kcp, _ := framework.Binaries(t)
			s.CreateWorkspaces("root:hist")
			s.Kubectl("root:hist", "-n", "default", "create", "configmap", "tracked", "--from-literal=v=1")
			s.Kubectl("root:hist", "-n", "default", "patch", "configmap", "tracked", "--type=merge", "-p", `{"data":{"v":"2"}}`)
			s.Kubectl("root:hist", "-n", "default", "delete", "configmap", "tracked")
			args := []string{"sql", "--root-dir", s.RootDir, "--report", "changes", "--cluster", "root:hist", "--since", "10m", "-o", "csv"}
			if s.Datastore != "" {
				args = append(args, "--datastore", s.Datastore)
			}
			changes := func() string {
				out, err := exec.Command(kcp, args...).CombinedOutput()
				if err != nil {
					t.Fatalf("kcp sql: %v\n%s", err, out)
				}
				return string(out)
			}
			out := changes()
			var ops []string
			for _, line := range strings.Split(out, "\n") {
				if strings.HasSuffix(line, "/core/configmaps/root:hist/default/tracked") {
					ops = append(ops, strings.Split(line, ",")[1])
				}
			}
			if strings.Join(ops, " ") != "create update delete" {
				t.Errorf("changes of the tracked configmap = %v\n%s", ops, out)
			}
			if !strings.Contains(out, "/tenancy.kcp.io/logicalclusters/root:hist/cluster") {
				t.Errorf("the workspace's own objects are missing from its history:\n%s", out)
			}
			// kine compacts the configmap's revisions away; the history keeps them.
			db := openDatastore(t, s)
			framework.Eventually(t, 30*time.Second, "kine to compact the configmap's revisions", func() (bool, string) {
				var n int
				err := db.QueryRow(`SELECT COUNT(*) FROM kine WHERE name = '/registry/core/configmaps/root:hist/default/tracked'`).Scan(&n)
				return err == nil && n == 0, fmt.Sprintf("%d rows, %v", n, err)
			})
			if again := changes(); strings.Count(again, "/core/configmaps/root:hist/default/tracked") != 3 {
				t.Errorf("history lost changes after compaction:\n%s", again)
			}
			// Retention: everything older than 40s goes.
			framework.Eventually(t, 60*time.Second, "the history to be pruned", func() (bool, string) {
				out := changes()
				return !strings.Contains(out, "tracked"), out
			})
		})
	}
}

// TestAuditEventsInDatastore records who did what, per logical cluster.
func TestAuditEventsInDatastore(t *testing.T) {
	forEachDialectWith(t, func(t *testing.T, dir string) []string {
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--audit-policy-file", policy, "--audit-to-datastore"}
	}, func(t *testing.T, s *framework.Server) {
		kcp, _ := framework.Binaries(t)
		s.CreateWorkspaces("root:audited")
		s.Kubectl("root:audited", "-n", "default", "create", "configmap", "watched-by-audit")
		args := []string{"sql", "--root-dir", s.RootDir, "--report", "audit", "--cluster", "root:audited", "--since", "10m", "-o", "csv"}
		if s.Datastore != "" {
			args = append(args, "--datastore", s.Datastore)
		}
		framework.Eventually(t, 20*time.Second, "the create to be audited", func() (bool, string) {
			out, err := exec.Command(kcp, args...).CombinedOutput()
			if err != nil {
				return false, fmt.Sprintf("%v: %s", err, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Split(line, ",")
				if len(f) == 8 && f[1] == "kcp-admin" && f[2] == "create" && f[4] == "configmaps" && f[6] == "watched-by-audit" && f[7] == "201" {
					return true, ""
				}
			}
			return false, string(out)
		})
	})
}

// forEachDialectWith is forEachDialect with extra server flags made in a
// temporary directory.
func forEachDialectWith(t *testing.T, flags func(t *testing.T, dir string) []string, fn func(t *testing.T, s *framework.Server)) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d), flags(t, t.TempDir())...)
			fn(t, s)
		})
	}
}
