package e2e

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
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

// accessReview posts a review to path as client c and returns its status.
func accessReview(t *testing.T, s *framework.Server, c *http.Client, path, body string) (allowed bool, reason string) {
	t.Helper()
	code, out := framework.Do(t, c, "POST", s.URL()+path, body)
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, code, out)
	}
	var review struct {
		Status struct {
			Allowed bool   `json:"allowed"`
			Reason  string `json:"reason"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return review.Status.Allowed, review.Status.Reason
}

// TestOpsAccessReviewsStayInWorkspace (issue 49 item 10 a): an access
// review in a workspace answers about that workspace only. Asked about a
// server-wide URL (/healthz, /metrics), it answered with root's RBAC
// (system:masters allowed, /healthz allowed for everyone) and named root's
// bindings and roles in its reason. In root, reviews still answer about
// root.
func TestOpsAccessReviewsStayInWorkspace(t *testing.T) {
	s := framework.StartServer(t, "")
	tenant := tenantAdmin(t, s, "sar-tenant", "sar-admin")
	admin := framework.UserClient(t, s, "sar-root-admin", "system:masters")
	const ws = "/clusters/root:sar-tenant"
	sar := func(user, group, path string) string {
		return fmt.Sprintf(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":%q,"groups":[%q],"nonResourceAttributes":{"path":%q,"verb":"get"}}}`, user, group, path)
	}
	rootNames := []string{"ClusterRoleBinding", "ClusterRole ", "system:public-info-viewer", "system:masters"}
	for _, row := range []struct {
		what, path, body string
	}{
		{"SubjectAccessReview of /healthz for any user", ws + "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar("someone", "system:authenticated", "/healthz")},
		{"SubjectAccessReview of /metrics for system:masters", ws + "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar("someone", "system:masters", "/metrics")},
		{"SubjectAccessReview of /readyz/datastore-writes for system:masters", ws + "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar("someone", "system:masters", "/readyz/datastore-writes")},
		{"SelfSubjectAccessReview of /healthz", ws + "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
			`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/healthz","verb":"get"}}}`},
	} {
		allowed, reason := accessReview(t, s, tenant, row.path, row.body)
		if allowed {
			t.Errorf("%s in a workspace: allowed (%q): it answered with root's RBAC", row.what, reason)
		}
		for _, name := range rootNames {
			if strings.Contains(reason, name) {
				t.Errorf("%s in a workspace: the reason names %q of root: %s", row.what, name, reason)
			}
		}
	}
	// The workspace's own RBAC still answers for its own URLs and objects.
	if allowed, reason := accessReview(t, s, tenant, ws+"/apis/authorization.k8s.io/v1/subjectaccessreviews",
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"sar-admin","resourceAttributes":{"verb":"create","resource":"configmaps","namespace":"default"}}}`); !allowed {
		t.Errorf("a review of the tenant admin's own rights in its workspace: not allowed (%s)", reason)
	}
	// Root answers about root.
	if allowed, reason := accessReview(t, s, admin, "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar("someone", "system:authenticated", "/healthz")); !allowed {
		t.Errorf("a review of /healthz in root: not allowed (%s)", reason)
	}
}

// serviceHook is a webhook configuration of kind whose one webhook has a
// service reference and failurePolicy policy, for config maps and widgets
// labelled svc=<name>.
func serviceHook(kind, name, policy string) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: %s
metadata: {name: %s}
webhooks:
- name: %s.example.com
  clientConfig: {service: {namespace: default, name: hook, port: 443}}
  rules:
  - {apiGroups: ["", "svc.example.com"], apiVersions: ["*"], operations: [CREATE, UPDATE], resources: [configmaps, widgets]}
  failurePolicy: %s
  objectSelector: {matchLabels: {svc: %s}}
  sideEffects: None
  admissionReviewVersions: [v1]
`, kind, name, name, policy, name)
}

// TestOpsWebhookServiceReference (issue 49 item 10 b): a webhook
// configuration with a service reference whose namespace is placed on no
// physical cluster is stored with a warning (kcp calls a Service's pods on
// the physical clusters its namespace is placed on:
// test/e2e/multicluster/webhooks_test.go); its calls fail, and the
// failurePolicy decides, as upstream: Fail refuses the requests it
// matches with a clear message, Ignore lets them through, for built-in
// resources and for custom resources (served by kcp's own CRD handler).
func TestOpsWebhookServiceReference(t *testing.T) {
	s := framework.StartServer(t, "")
	const ws = "root:svc-hooks"
	s.CreateWorkspaces(ws)
	s.Kubectl(ws, "apply", "-f", framework.WriteFile(t, "crd.yaml", framework.NamespacedCRD("svc.example.com", "widgets", "Widget", `{type: object, x-kubernetes-preserve-unknown-fields: true}`)))
	s.WaitEstablished(ws, "crd/widgets.svc.example.com")
	for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		for _, policy := range []string{"Fail", "Ignore"} {
			name := strings.ToLower(kind[:1]) + "-" + strings.ToLower(policy)
			out, err := s.KubectlErr(ws, serviceHook(kind, name, policy), "apply", "-f", "-")
			if err != nil {
				t.Fatalf("%s with a service reference and failurePolicy %s refused: %v\n%s", kind, policy, err, out)
			}
			if !strings.Contains(out, "not placed on any SyncTarget") {
				t.Errorf("%s with a service reference: no warning:\n%s", kind, out)
			}
		}
	}
	ctx := context.Background()
	create := func(resource, label string) error {
		name := label + "-" + framework.RandomSuffix()
		if resource == "configmaps" {
			_, err := s.Client(ws).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: name, Labels: map[string]string{"svc": label}}}, metav1.CreateOptions{})
			return err
		}
		out, err := s.KubectlErr(ws, "apiVersion: svc.example.com/v1\nkind: Widget\nmetadata: {name: "+name+", namespace: default, labels: {svc: "+label+"}}\n", "create", "-f", "-")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	for _, resource := range []string{"configmaps", "widgets"} {
		for _, hook := range []string{"v-fail", "m-fail"} {
			framework.Eventually(t, 30*time.Second, resource+", "+hook+": a failing call refuses (the webhooks are in effect)", func() (bool, string) {
				err := create(resource, hook)
				return err != nil && strings.Contains(err.Error(), "Service default/hook") && strings.Contains(err.Error(), "not placed on any SyncTarget"), fmt.Sprint(err)
			})
		}
		for _, hook := range []string{"v-ignore", "m-ignore"} {
			if err := create(resource, hook); err != nil {
				t.Errorf("%s, %s: a create matched by a service-referencing webhook with failurePolicy Ignore failed: %v", resource, hook, err)
			}
		}
	}
	// An aggregated API (an APIService served by a Service) is refused in
	// a workspace, saying why: kcp's aggregator serves root only, so it
	// would be stored and never served.
	out, err := s.KubectlErr(ws, `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec: {group: metrics.k8s.io, version: v1beta1, service: {namespace: kube-system, name: metrics-server}, groupPriorityMinimum: 100, versionPriority: 100}
`, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "kcp does not serve aggregated APIs in a workspace") {
		t.Errorf("an aggregated APIService in a workspace: want a clear refusal, got %v\n%s", err, out)
	}
}
