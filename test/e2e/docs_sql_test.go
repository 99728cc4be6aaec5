package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// docQueries returns the SQL statements of the ```sql blocks of a doc, each
// tagged with the dialect it is written for ("" = both).
func docQueries(t *testing.T, doc string) map[string]string {
	raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), doc))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	blocks := strings.Split(string(raw), "```sql\n")
	for _, b := range blocks[1:] {
		b = b[:strings.Index(b, "```")]
		dialect := ""
		var stmt strings.Builder
		for _, line := range strings.Split(b, "\n") {
			switch strings.TrimSpace(line) {
			case "-- PostgreSQL":
				dialect = "postgres"
				continue
			case "-- SQLite":
				dialect = "sqlite"
				continue
			}
			stmt.WriteString(line + "\n")
			if strings.HasSuffix(strings.TrimSpace(line), ";") {
				q := strings.TrimSpace(stmt.String())
				d := dialect
				if d == "" && strings.Contains(q, "json_extract") {
					d = "sqlite"
				}
				if d == "" && (strings.Contains(q, "->") || strings.Contains(q, "::jsonb")) {
					d = "postgres"
				}
				out[q] = d
				stmt.Reset()
			}
		}
	}
	return out
}

// TestDocumentedQueries runs every SQL query of the docs on the dialects it
// is written for, against a server holding data, so the docs stay true.
func TestDocumentedQueries(t *testing.T) {
	forEachDialectWith(t, func(t *testing.T, dir string) []string {
		policy := filepath.Join(dir, "policy.yaml")
		os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600)
		return []string{"--change-history", "--audit-policy-file", policy, "--audit-to-datastore"}
	}, func(t *testing.T, s *framework.Server) {
		s.CreateWorkspaces("root:team-a")
		s.Kubectl("root:team-a", "-n", "default", "create", "configmap", "settings", "--from-literal=color=blue")
		db := openDatastore(t, s)
		n := 0
		for _, doc := range []string{"docs/sql-auditing.md", "docs/crds.md", "README.md"} {
			for q, d := range docQueries(t, doc) {
				if d != "" && d != string(dialectOf(s)) {
					continue
				}
				rows, err := db.Query(q)
				if err != nil {
					t.Errorf("%s: query fails on %s: %v\n%s", doc, dialectOf(s), err, q)
					continue
				}
				rows.Close()
				n++
			}
		}
		if n < 6 {
			t.Errorf("only %d documented queries ran", n)
		}
	})
}

func dialectOf(s *framework.Server) framework.Dialect {
	if s.Datastore == "" {
		return framework.SQLite
	}
	return framework.Postgres
}
