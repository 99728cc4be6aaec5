package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// ackedWrites records what a fleet of writers was told: every create that
// answered 201, every 409 for a name no one else used (a false
// AlreadyExists), and the other errors by status code.
type ackedWrites struct {
	mu        sync.Mutex
	acked     []string
	conflicts []string
	errors    map[int]int
	leaks     []string // error messages that show datastore internals
	stop      func()   // stops the writers and waits for them
}

// runWriters creates config maps with unique names in namespace ns from n
// writers until w.stop is called (at the latest when the test ends). Requests are not retried by the client, so each
// answer is the server's answer to that one request.
func runWriters(t *testing.T, cs *kubernetes.Clientset, ns string, n int, payload int) *ackedWrites {
	t.Helper()
	w := &ackedWrites{errors: map[int]int{}}
	stop := make(chan struct{})
	data := strings.Repeat("x", payload)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%02d-%06d", i, j)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"d": data}}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("configmaps").Body(cm).MaxRetries(0).Do(ctx).Error()
				cancel()
				w.mu.Lock()
				switch {
				case err == nil:
					w.acked = append(w.acked, name)
				case apierrors.IsAlreadyExists(err):
					w.conflicts = append(w.conflicts, name)
				default:
					code := 0
					if s, ok := err.(apierrors.APIStatus); ok {
						code = int(s.Status().Code)
					}
					w.errors[code]++
					msg := err.Error()
					for _, leak := range []string{"failed to connect", "user=", "database=", "SQLSTATE", "sqlite", "disk I/O", "pgconn", "rpc error"} {
						if strings.Contains(msg, leak) {
							w.leaks = append(w.leaks, msg)
							break
						}
					}
				}
				w.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}(i)
	}
	var once sync.Once
	w.stop = func() { once.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(w.stop)
	return w
}

// verifyAcked checks that every acknowledged create is stored, that no name
// got a false 409, and that no error showed datastore internals.
func verifyAcked(t *testing.T, cs *kubernetes.Clientset, ns string, w *ackedWrites) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	var stored map[string]bool
	framework.Eventually(t, 60*time.Second, "listing the config maps after the fault", func() (bool, string) {
		l, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		stored = map[string]bool{}
		for _, cm := range l.Items {
			stored[cm.Name] = true
		}
		return true, ""
	})
	var lost []string
	for _, name := range w.acked {
		if !stored[name] {
			lost = append(lost, name)
		}
	}
	t.Logf("acknowledged creates: %d, stored: %d, lost: %d, false 409s: %d, errors by status: %v",
		len(w.acked), len(stored), len(lost), len(w.conflicts), w.errors)
	if len(w.acked) == 0 {
		t.Fatal("no create was acknowledged: the test measured nothing")
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged creates were never stored, e.g. %v", len(lost), lost[:min(5, len(lost))])
	}
	if len(w.conflicts) > 0 {
		t.Errorf("%d creates of names no one else used answered 409 AlreadyExists, e.g. %v", len(w.conflicts), w.conflicts[:min(5, len(w.conflicts))])
	}
	if len(w.leaks) > 0 {
		t.Errorf("%d error messages showed datastore internals to the client, e.g. %q", len(w.leaks), w.leaks[0])
	}
	if n := w.errors[500]; n > 0 {
		t.Errorf("%d requests answered 500 during the fault; a datastore outage must answer 503", n)
	}
}

func fastClient(t *testing.T, s *framework.Server) *kubernetes.Clientset {
	cfg := s.Config("root")
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// faultsNamespace creates the namespace the writers write into.
func faultsNamespace(t *testing.T, cs *kubernetes.Clientset) string {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "faults"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return "faults"
}

func readyzFailing(s *framework.Server, cs *kubernetes.Clientset) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
	return err != nil, string(body)
}

// TestFaultSQLiteDiskFull: the SQLite file cannot grow (its size limit is
// the file-size rlimit of the kcp process, as on a full disk) while 16
// writers create objects. Every create answers 201 only if it is stored; the
// others answer 503; /readyz says why; after space returns, writes resume.
func TestFaultSQLiteDiskFull(t *testing.T) {
	s := framework.StartServer(t, "")
	cs := fastClient(t, s)
	ns := faultsNamespace(t, cs)
	w := runWriters(t, cs, ns, 16, 2048)
	time.Sleep(2 * time.Second)

	fillDisk(t, s, cs, 2<<20)
	time.Sleep(3 * time.Second)
	freeDisk(t, s)
	framework.Eventually(t, 60*time.Second, "/readyz to pass once writes succeed again", func() (bool, string) {
		failing, body := readyzFailing(s, cs)
		return !failing, body
	})
	time.Sleep(2 * time.Second)
	verifyAcked(t, cs, ns, w)
	w.mu.Lock()
	refused := w.errors[503]
	w.mu.Unlock()
	if refused == 0 {
		t.Errorf("no create answered 503 while the disk was full: the fault was not injected")
	}
	if log, _ := os.ReadFile(s.LogFile); !strings.Contains(string(log), "the datastore did not store a write") {
		t.Errorf("the server logged nothing about the failed writes")
	}
}

// fillDisk "fills the disk" of SQLite server s: no file of kcp may grow
// past its size now plus headroom bytes, so SQLite's database and WAL soon
// cannot grow. It returns once /readyz fails on the failed writes.
func fillDisk(t *testing.T, s *framework.Server, cs *kubernetes.Clientset, headroom int64) {
	t.Helper()
	var largest int64
	for _, f := range []string{"kcp.db", "kcp.db-wal"} {
		if st, err := os.Stat(filepath.Join(s.RootDir, f)); err == nil && st.Size() > largest {
			largest = st.Size()
		}
	}
	limit := uint64(largest + headroom)
	if st, err := os.Stat(s.LogFile); err == nil && uint64(st.Size())+(1<<20) > limit {
		t.Fatalf("the server log (%d bytes) would hit the size limit before the database does", st.Size())
	}
	if err := unix.Prlimit(s.Pid(), unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatalf("limiting kcp's file size: %v", err)
	}
	t.Logf("file size limit %d MiB", limit>>20)
	framework.Eventually(t, 60*time.Second, "/readyz to fail while writes fail", func() (bool, string) {
		failing, body := readyzFailing(s, cs)
		return failing && strings.Contains(body, "datastore-writes"), body
	})
}

// freeDisk gives server s its space back (fillDisk).
func freeDisk(t *testing.T, s *framework.Server) {
	t.Helper()
	if err := unix.Prlimit(s.Pid(), unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestFaultPostgresSessionsKilled: kcp's database sessions are terminated
// ten times under 16 writers; every acknowledged create is stored and no
// create answers a false 409.
func TestFaultPostgresSessionsKilled(t *testing.T) {
	ds := framework.FreshPostgres(t)
	s := framework.StartServer(t, ds)
	cs := fastClient(t, s)
	ns := faultsNamespace(t, cs)
	w := runWriters(t, cs, ns, 16, 256)
	time.Sleep(2 * time.Second)
	killSessions(t, ds)
	time.Sleep(3 * time.Second)
	verifyAcked(t, cs, ns, w)
}

// killSessions terminates every session of the datastore ds ten times,
// 700 ms apart.
func killSessions(t *testing.T, ds string) {
	t.Helper()
	admin, err := sql.Open("pgx", framework.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	u, _ := url.Parse(ds)
	db := strings.TrimPrefix(u.Path, "/")
	killed := 0
	for range 10 {
		var n int
		if err := admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
		time.Sleep(700 * time.Millisecond)
	}
	t.Logf("terminated %d sessions", killed)
}

// TestFaultQuotaSessionsKilled: the write paths of quota admission (each
// create charged to the quota's status first) and of workspace limits (the
// workspace counted with SQL) under PostgreSQL sessions killed while 16
// writers fill a quota-limited namespace of a capped workspace. Every
// acknowledged create is stored, a failure answers 503 (never 500, never
// the datastore's words), the namespace never holds more than the quota
// allows, and status.used settles on what is stored.
func TestFaultQuotaSessionsKilled(t *testing.T) {
	ds := framework.FreshPostgres(t)
	s := framework.StartServer(t, ds, "--workspace-max-objects=100000")
	const ws, hard = "root:quota-faults", 500
	s.CreateWorkspaces(ws)
	cfg := s.Config(ws)
	cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, 30*time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := faultsNamespace(t, cs)
	s.Kubectl(ws, "create", "quota", "q", "-n", ns, fmt.Sprintf("--hard=count/configmaps=%d", hard))
	used := func() string {
		return s.Kubectl(ws, "get", "quota", "q", "-n", ns, "-o", "jsonpath={.status.used.count/configmaps}")
	}
	framework.Eventually(t, 30*time.Second, "the quota counted", func() (bool, string) { u := used(); return u != "", u })
	w := runWriters(t, cs, ns, 16, 256)
	time.Sleep(time.Second)
	killSessions(t, ds)
	time.Sleep(2 * time.Second)
	w.mu.Lock()
	refused := w.errors[403]
	delete(w.errors, 403) // the quota's refusals once it is full
	w.mu.Unlock()
	verifyAcked(t, cs, ns, w)
	list, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d config maps stored (kube-root-ca.crt included), %d creates refused by the quota", len(list.Items), refused)
	if len(list.Items) > hard {
		t.Errorf("the namespace holds %d config maps, more than its quota's %d", len(list.Items), hard)
	}
	framework.Eventually(t, 60*time.Second, "status.used settled on what is stored", func() (bool, string) {
		u := used()
		return u == fmt.Sprint(len(list.Items)), u
	})
}

// TestFaultPolicySessionsKilled: the write path of admission policy type
// checking (status written by a shared controller for every cluster's
// ValidatingAdmissionPolicies) and of root's kcp-tenants APF objects under
// PostgreSQL sessions killed while policies are created in two
// workspaces. Every acknowledged policy is stored, a failure answers 503
// (never 500), and every stored policy gets its type-checking status for
// its generation.
func TestFaultPolicySessionsKilled(t *testing.T) {
	ds := framework.FreshPostgres(t)
	s := framework.StartServer(t, ds)
	const a, b = "root:policy-faults-a", "root:policy-faults-b"
	s.CreateWorkspaces(a, b)
	ctx := context.Background()
	clients := map[string]*kubernetes.Clientset{}
	for _, ws := range []string{a, b} {
		cfg := s.Config(ws)
		cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, 30*time.Second
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients[ws] = cs
	}
	policy := func(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{"CREATE"},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
				// A type error, so the status has a warning to carry.
				Validations: []admissionregistrationv1.Validation{{Expression: `object.metadata.name == 1`}},
			}}
	}
	var mu sync.Mutex
	acked := map[string][]string{}
	codes := map[int]int{}
	var wg sync.WaitGroup
	for _, ws := range []string{a, b} {
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 15 {
					name := fmt.Sprintf("p-%d-%d", w, i)
					_, err := clients[ws].AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy(name), metav1.CreateOptions{})
					mu.Lock()
					if err == nil {
						acked[ws] = append(acked[ws], name)
					} else if st, ok := err.(apierrors.APIStatus); ok {
						codes[int(st.Status().Code)]++
					} else {
						codes[0]++
					}
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
	}
	time.Sleep(500 * time.Millisecond)
	killSessions(t, ds)
	wg.Wait()
	t.Logf("acknowledged: %d in A, %d in B; failures by code: %v", len(acked[a]), len(acked[b]), codes)
	if codes[500] > 0 {
		t.Errorf("%d creates answered 500", codes[500])
	}
	for _, ws := range []string{a, b} {
		for _, name := range acked[ws] {
			framework.Eventually(t, 60*time.Second, ws+" policy "+name+" type-checked", func() (bool, string) {
				p, err := clients[ws].AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				tc := p.Status.TypeChecking
				return p.Status.ObservedGeneration == p.Generation && tc != nil && len(tc.ExpressionWarnings) > 0, fmt.Sprintf("%+v", p.Status)
			})
		}
	}
	// Root's kcp-tenants objects were written at start and are there.
	if _, err := s.Client("root").FlowcontrolV1().FlowSchemas().Get(ctx, "kcp-tenants", metav1.GetOptions{}); err != nil {
		t.Errorf("root's kcp-tenants FlowSchema: %v", err)
	}
}

// TestFaultKill9: kcp is killed (SIGKILL) under 16 writers and restarted;
// every acknowledged create is there afterwards.
func TestFaultKill9(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			cs := fastClient(t, s)
			ns := faultsNamespace(t, cs)
			w := runWriters(t, cs, ns, 16, 256)
			time.Sleep(3 * time.Second)
			s.Kill()
			w.stop()
			start := time.Now()
			s.Start()
			t.Logf("ready again %s after the restart began", time.Since(start).Round(time.Millisecond))
			w.mu.Lock()
			// Requests cut by the kill have no answer; they are not counted.
			delete(w.errors, 0)
			w.mu.Unlock()
			verifyAcked(t, cs, ns, w)
		})
	}
}

// TestSIGTERMWithOpenWatches: a server with open watches exits promptly on
// SIGTERM (well within an orchestrator's 30 s grace period).
func TestSIGTERMWithOpenWatches(t *testing.T) {
	s := framework.StartServer(t, "")
	cs := fastClient(t, s)
	for i := 0; i < 5; i++ {
		wi, err := cs.CoreV1().ConfigMaps("").Watch(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer wi.Stop()
	}
	took, err := s.Terminate(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kcp exited %s after SIGTERM", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("kcp took %s to exit after SIGTERM with open watches; want under 15s", took)
	}
}

// TestBadResourceVersion: a resourceVersion that is not a number is a 400
// for get, list and watch, not a 500.
func TestBadResourceVersion(t *testing.T) {
	s := framework.StartServer(t, "")
	cs := fastClient(t, s)
	ctx := context.Background()
	_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{ResourceVersion: "garbage"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("get with resourceVersion=garbage: got %v, want 400 Bad Request", err)
	}
	_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{ResourceVersion: "garbage"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("list with resourceVersion=garbage: got %v, want 400 Bad Request", err)
	}
	_, err = cs.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{ResourceVersion: "garbage"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("watch with resourceVersion=garbage: got %v, want 400 Bad Request", err)
	}
}

// TestFaultPostgresRestart restarts the PostgreSQL server under 16 writers,
// once cleanly and once as a crash (immediate stop), with the commands in
// KCP_TEST_PG_RESTART and KCP_TEST_PG_CRASH (make faults sets them for a
// local Debian cluster). It restarts the whole server, so it runs only when
// asked: never in CI, where other tests share the database server.
func TestFaultPostgresRestart(t *testing.T) {
	cmds := map[string]string{"restart": os.Getenv("KCP_TEST_PG_RESTART"), "crash": os.Getenv("KCP_TEST_PG_CRASH")}
	if cmds["restart"] == "" && cmds["crash"] == "" {
		t.Skip("set KCP_TEST_PG_RESTART / KCP_TEST_PG_CRASH to commands that restart PostgreSQL (make faults)")
	}
	for _, how := range []string{"restart", "crash"} {
		if cmds[how] == "" {
			continue
		}
		t.Run(how, func(t *testing.T) {
			s := framework.StartServer(t, framework.FreshPostgres(t))
			cs := fastClient(t, s)
			ns := faultsNamespace(t, cs)
			w := runWriters(t, cs, ns, 16, 256)
			time.Sleep(3 * time.Second)
			w.mu.Lock()
			before := len(w.acked)
			w.mu.Unlock()
			start := time.Now()
			if out, err := exec.Command("sh", "-c", cmds[how]).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cmds[how], err, out)
			}
			// Writes resume: the count of acknowledged creates grows again.
			framework.Eventually(t, 60*time.Second, "writes to resume after the database is back", func() (bool, string) {
				w.mu.Lock()
				defer w.mu.Unlock()
				return len(w.acked) > before+100, fmt.Sprintf("%d acknowledged", len(w.acked))
			})
			t.Logf("writes resumed %s after the %s command began", time.Since(start).Round(time.Millisecond), how)
			time.Sleep(2 * time.Second)
			verifyAcked(t, cs, ns, w)
		})
	}
}
