package e2e

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// Issue 49, items 10 and 12: what an operator reads (logs, /readyz) and
// what a tenant may learn from access reviews and webhook configurations.

// openDatastoreRW opens server s's database for writing (SQLite's file, or
// the test's PostgreSQL database), to inject faults with triggers.
func openDatastoreRW(t *testing.T, s *framework.Server) (*sql.DB, bool) {
	t.Helper()
	sqlite := s.Datastore == ""
	var db *sql.DB
	var err error
	if sqlite {
		db, err = sql.Open("sqlite3", "file:"+filepath.Join(s.RootDir, "kcp.db")+"?_busy_timeout=10000")
	} else {
		db, err = sql.Open("pgx", s.Datastore)
	}
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db, sqlite
}

// refuseInserts makes the datastore refuse every row kine inserts whose
// key starts with prefix ("" = every row): a write that is not stored, as
// on a full disk, but only for the keys chosen. It returns a function that
// lifts the refusal.
func refuseInserts(t *testing.T, s *framework.Server, prefix string) func() {
	t.Helper()
	db, sqlite := openDatastoreRW(t, s)
	var create, drop []string
	if sqlite {
		create = []string{fmt.Sprintf(`CREATE TRIGGER kcp_test_refuse BEFORE INSERT ON kine WHEN NEW.name LIKE '%s%%'
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`, prefix)}
		drop = []string{`DROP TRIGGER kcp_test_refuse`}
	} else {
		create = []string{
			`CREATE FUNCTION kcp_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
			fmt.Sprintf(`CREATE TRIGGER kcp_test_refuse BEFORE INSERT ON kine FOR EACH ROW WHEN (NEW.name LIKE '%s%%') EXECUTE FUNCTION kcp_test_refuse()`, prefix),
		}
		drop = []string{`DROP TRIGGER kcp_test_refuse ON kine`, `DROP FUNCTION kcp_test_refuse()`}
	}
	for _, q := range create {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	lifted := false
	lift := func() {
		if lifted {
			return
		}
		lifted = true
		for _, q := range drop {
			if _, err := db.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	}
	t.Cleanup(lift)
	return lift
}

// slowInserts makes every insert of a key below prefix take about a second
// in the datastore, so that a client can go away while its write is there.
func slowInserts(t *testing.T, s *framework.Server, prefix string) {
	t.Helper()
	db, sqlite := openDatastoreRW(t, s)
	var qs []string
	if sqlite {
		// SQLite has no sleep: count instead (about a second on 2 cores).
		qs = []string{fmt.Sprintf(`CREATE TRIGGER kcp_test_slow BEFORE INSERT ON kine WHEN NEW.name LIKE '%s%%'
			BEGIN SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 5000000) SELECT x FROM c); END`, prefix)}
	} else {
		qs = []string{
			`CREATE FUNCTION kcp_test_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$`,
			fmt.Sprintf(`CREATE TRIGGER kcp_test_slow BEFORE INSERT ON kine FOR EACH ROW WHEN (NEW.name LIKE '%s%%') EXECUTE FUNCTION kcp_test_slow()`, prefix),
		}
	}
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func logSize(t *testing.T, s *framework.Server) int64 {
	t.Helper()
	st, err := os.Stat(s.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// readyzAs reads /readyz?verbose with client c (status and body).
func readyzAs(t *testing.T, s *framework.Server, c *http.Client, prefix string) (int, string) {
	t.Helper()
	return framework.Do(t, c, "GET", s.URL()+prefix+"/readyz?verbose", "")
}

// TestOpsDatastoreFailureLogs (issue 49 item 12 a, b): while the datastore
// refuses writes, 200 Secrets are created. The log must hold none of their
// values (kine logged each failed write's whole request, Secrets included)
// and stay small (it logged every failure: 57 MB in 40 s on a full disk).
// /readyz?verbose tells the admin why datastore-writes fails, as
// docs/operations.md says, and withholds the reason from a tenant (and
// from its /clusters prefix).
func TestOpsDatastoreFailureLogs(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			cs := fastClient(t, s)
			ctx := context.Background()
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			tenantAdmin(t, s, "ops-tenant", "ops-tenant-admin")
			tenant := framework.UserClient(t, s, "ops-tenant-admin")
			admin := framework.UserClient(t, s, "ops-admin", "system:masters")

			marker := "s3cr3t-" + framework.RandomSuffix()
			payload := marker + strings.Repeat("x", 4096)
			encoded := base64.StdEncoding.EncodeToString([]byte(payload))
			before := logSize(t, s)
			lift := refuseInserts(t, s, "")
			// One attempt each (client-go would retry every 503 after
			// its Retry-After, ten times).
			refused := 0
			for i := range 200 {
				code, _ := framework.Do(t, admin, "POST", s.URL()+"/api/v1/namespaces/ops/secrets",
					fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s-%d"},"data":{"password":%q}}`, i, encoded))
				if code == http.StatusServiceUnavailable {
					refused++
				}
			}
			t.Logf("%d of 200 creates refused", refused)
			if refused < 190 {
				t.Fatalf("only %d of 200 creates failed: the fault was not injected", refused)
			}
			framework.Eventually(t, 30*time.Second, "/readyz to fail on datastore-writes", func() (bool, string) {
				code, body := readyzAs(t, s, admin, "")
				return code != http.StatusOK && strings.Contains(body, "datastore-writes"), body
			})

			// Readiness: the admin sees why; a tenant does not, whatever
			// the prefix.
			code, body := readyzAs(t, s, admin, "")
			if code == http.StatusOK || !strings.Contains(body, "[-]datastore-writes failed: writes to the datastore have failed since") {
				t.Errorf("/readyz?verbose as system:masters does not say why datastore-writes fails (%d):\n%s", code, body)
			}
			for _, prefix := range []string{"", "/clusters/root:ops-tenant"} {
				code, body := readyzAs(t, s, tenant, prefix)
				if !strings.Contains(body, "[-]datastore-writes failed: reason withheld") || strings.Contains(body, "writes to the datastore") || strings.Contains(body, "refused by the test") {
					t.Errorf("%s/readyz?verbose as a tenant (%d) must withhold the reason:\n%s", prefix, code, body)
				}
			}
			if code, body := framework.Do(t, tenant, "GET", s.URL()+"/readyz/datastore-writes", ""); code == http.StatusInternalServerError || strings.Contains(body, "datastore have failed") {
				t.Errorf("a tenant read the check's own endpoint (%d): %s", code, body)
			}

			lift()
			framework.Eventually(t, 60*time.Second, "/readyz to pass once writes are stored again", func() (bool, string) {
				code, body := readyzAs(t, s, admin, "")
				return code == http.StatusOK, body
			})

			logged, err := os.ReadFile(s.LogFile)
			if err != nil {
				t.Fatal(err)
			}
			grown := logged[before:]
			for _, leak := range []string{marker, encoded[:40]} {
				if strings.Contains(string(grown), leak) {
					i := strings.Index(string(grown), leak)
					t.Errorf("the log holds a Secret's value (%q):\n...%s...", leak, grown[max(0, i-300):min(len(grown), i+100)])
				}
			}
			// 200 failed writes of 4 KiB each: kine's dumps alone were
			// about 2 MB; what is left is a few rate-limited lines.
			if len(grown) > 256<<10 {
				t.Errorf("the log grew by %d KiB while 200 writes failed; want under 256 KiB", len(grown)>>10)
			}
			t.Logf("log grew by %d bytes while the datastore refused writes", len(grown))
			if !strings.Contains(string(grown), "the datastore did not store a write") {
				t.Errorf("the failed writes were not logged at all")
			}
		})
	}
}

// TestOpsCancelledCreate (issue 49 item 12 c): a client that gives up on its
// create (its context cancelled, the stream reset) while the write is in
// the datastore is no datastore fault: nothing is logged as a failed
// write and /readyz stays ready.
func TestOpsCancelledCreate(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			cs := fastClient(t, s)
			ctx := context.Background()
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "slow"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			slowInserts(t, s, "/registry/core/configmaps/root/slow/")
			before := logSize(t, s)
			left := 0
			for i := range 3 {
				cctx, cancel := context.WithCancel(ctx)
				// The insert takes about a second; the client leaves
				// while it runs (or waits for its turn).
				timer := time.AfterFunc(300*time.Millisecond, cancel)
				_, err := cs.CoreV1().ConfigMaps("slow").Create(cctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i)}}, metav1.CreateOptions{})
				timer.Stop()
				cancel()
				if err == nil {
					t.Logf("create %d finished before its client left", i)
				} else {
					left++
				}
			}
			if left == 0 {
				t.Fatal("every create finished before its client left: nothing was cancelled")
			}
			// A create that waits: on SQLite it is written after the
			// abandoned ones (one writer), on PostgreSQL they were
			// cancelled in the database.
			if _, err := cs.CoreV1().ConfigMaps("slow").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "waited"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			admin := framework.UserClient(t, s, "ops-admin", "system:masters")
			if code, body := framework.Do(t, admin, "GET", s.URL()+"/readyz/datastore-writes", ""); code != http.StatusOK {
				t.Errorf("a cancelled create made the datastore unready (%d): %s", code, body)
			}
			logged, err := os.ReadFile(s.LogFile)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(logged[before:]), "\n") {
				// "stores writes again": it was marked unhealthy, and
				// the next write made it healthy again.
				if strings.Contains(line, "the datastore did not store a write") || strings.Contains(line, "datastore error") ||
					strings.Contains(line, "the datastore stores writes again") {
					t.Errorf("a cancelled create was logged as a datastore failure: %s", line)
				}
			}
		})
	}
}
