// Package framework starts the real kcp binary for end-to-end tests and hands
// out the real kubectl and client-go clients aimed at its logical clusters.
package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/schema/tenancy"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var buildOnce sync.Once
var buildErr error

// Binaries returns the paths of bin/kcp and bin/kubectl, building them (and
// bin/kubectl-kcp, bin/syncer) once when they are missing (make test builds
// them first).
func Binaries(t testing.TB) (kcp, kubectl string) {
	t.Helper()
	root := RepoRoot()
	kcp, kubectl = filepath.Join(root, "bin", "kcp"), filepath.Join(root, "bin", "kubectl")
	buildOnce.Do(func() {
		for _, bin := range []string{kcp, kubectl, filepath.Join(root, "bin", "kubectl-kcp"), filepath.Join(root, "bin", "syncer")} {
			if _, err := os.Stat(bin); err == nil {
				continue
			}
			// As `make test` builds them: with the version the Makefile
			// stamps in (kubectl version and discovery tests read it).
			cmd := exec.Command("make", "build", "bin/kubectl")
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building the binaries (make build bin/kubectl): %v\n%s", err, out)
			}
			return
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return kcp, kubectl
}

// Dialect names a datastore kind under test.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Dialects are the datastores every e2e test runs on.
var Dialects = []Dialect{SQLite, Postgres}

// PostgresDSN is the server tests use (KCP_TEST_POSTGRES_DSN).
func PostgresDSN() string { return datastoretest.BaseDSN() }

// FreshPostgres creates an empty database for one test and drops it after.
// Without a reachable server it skips loudly, or fails when
// KCP_TEST_REQUIRE_POSTGRES=1 (as in CI).
func FreshPostgres(t testing.TB) string { return datastoretest.PostgresDSN(t) }

// RandomSuffix is a short random lower-case hex string.
func RandomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// DatastoreFor returns a --datastore value for the dialect ("" = SQLite default).
func DatastoreFor(t testing.TB, d Dialect) string {
	if d == Postgres {
		return FreshPostgres(t)
	}
	return ""
}

// Server is a running bin/kcp.
type Server struct {
	t          testing.TB
	RootDir    string
	Datastore  string
	Port       int
	Kubeconfig string
	LogFile    string
	Args       []string
	// Prefix, when set, is a command the kcp command line is appended to
	// (a wrapper that execs it).
	Prefix []string
	cmd    *exec.Cmd
	done   chan error
}

// FreePort asks the kernel for an unused TCP port.
func FreePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartServer starts kcp with a new root directory on the given datastore
// ("" = SQLite in the root directory) and waits until it is ready.
func StartServer(t testing.TB, datastore string, extraArgs ...string) *Server {
	t.Helper()
	s := newServer(t, datastore, extraArgs, "")
	s.Start()
	return s
}

// StartServerWrapped is StartServer with kcp's command line appended to
// prefix, a command that execs it (to start kcp in a cgroup, say).
func StartServerWrapped(t testing.TB, datastore string, prefix []string, extraArgs ...string) *Server {
	t.Helper()
	s := newServer(t, datastore, extraArgs, "")
	s.Prefix = prefix
	s.Start()
	return s
}

// newServer is a server not started yet, with its own root directory
// (holding the PKI copied from pkiFrom's, when given), port and log file;
// it is stopped when the test ends.
func newServer(t testing.TB, datastore string, args []string, pkiFrom string) *Server {
	t.Helper()
	s := &Server{t: t, RootDir: t.TempDir(), Datastore: datastore, Args: args}
	if pkiFrom != "" {
		copyPKI(t, pkiFrom, s.RootDir)
	}
	s.Port = FreePort(t)
	s.Kubeconfig = filepath.Join(s.RootDir, "admin.kubeconfig")
	s.LogFile = filepath.Join(s.RootDir, "kcp.log")
	t.Cleanup(s.Stop)
	return s
}

// Start (re)starts the process on the same root directory and port.
func (s *Server) Start() {
	s.t.Helper()
	s.launch()
	s.ready()
}

// ready waits until the started process answers /readyz.
func (s *Server) ready() {
	s.t.Helper()
	if err := s.waitReady(90 * time.Second); err != nil {
		s.t.Fatalf("kcp did not become ready: %v\n--- last log lines ---\n%s", err, s.LogTail(40))
	}
}

// launch starts the process without waiting for it.
func (s *Server) launch() {
	s.t.Helper()
	kcp, _ := Binaries(s.t)
	args := []string{"start", "--root-dir", s.RootDir, "--secure-port", fmt.Sprint(s.Port)}
	if s.Datastore != "" {
		args = append(args, "--datastore", s.Datastore)
	}
	args = append(args, s.Args...)
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	cmdline := append(append(slices.Clone(s.Prefix), kcp), args...)
	s.cmd = exec.Command(cmdline[0], cmdline[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait(); logf.Close() }()
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err // for Stop, which waits for it
			return fmt.Errorf("kcp exited: %v", err)
		default:
		}
		if _, err := os.Stat(s.Kubeconfig); err == nil {
			cfg, err := s.baseConfig()
			if err == nil {
				var c *kubernetes.Clientset
				if c, err = kubernetes.NewForConfig(cfg); err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err = c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
					cancel()
					if err == nil {
						return nil
					}
				}
			}
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Say which checks fail: the verbose answer names them.
	if cfg, err := s.baseConfig(); err == nil {
		if c, err := kubernetes.NewForConfig(cfg); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			body, _ := c.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
			cancel()
			var failing []string
			for _, l := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(l, "[-]") {
					failing = append(failing, l)
				}
			}
			last = fmt.Errorf("%v; failing checks: %s", last, strings.Join(failing, "; "))
		}
	}
	return fmt.Errorf("timed out after %s: %v", timeout, last)
}

// Stop sends SIGTERM and waits for the process to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// LogTail returns the last n lines of the server log.
func (s *Server) LogTail(n int) string { return logTail(s.LogFile, n) }

// logTail returns the last n lines of a log file.
func logTail(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// URL is the server's base URL.
func (s *Server) URL() string { return fmt.Sprintf("https://127.0.0.1:%d", s.Port) }

func (s *Server) baseConfig() (*rest.Config, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: s.Kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: "base"}).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// Config returns the admin's client config for one logical cluster
// ("*" for all clusters).
func (s *Server) Config(cluster string) *rest.Config {
	s.t.Helper()
	cfg, err := s.baseConfig()
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.Host = s.URL() + "/clusters/" + cluster
	return cfg
}

// Client returns an admin clientset for one logical cluster.
func (s *Server) Client(cluster string) *kubernetes.Clientset {
	s.t.Helper()
	c, err := kubernetes.NewForConfig(s.Config(cluster))
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// Kubectl runs the real kubectl as the admin against one logical cluster and
// returns its combined output; it fails the test on a non-zero exit.
func (s *Server) Kubectl(cluster string, args ...string) string {
	s.t.Helper()
	out, err := s.KubectlErr(cluster, "", args...)
	if err != nil {
		s.t.Fatalf("kubectl %s (cluster %s): %v\n%s", strings.Join(args, " "), cluster, err, out)
	}
	return out
}

// KubectlPlugin runs kubectl with a kubeconfig of the caller's (which the
// plugin may edit) and bin/ first on PATH, so `kubectl kcp` finds the plugin.
func (s *Server) KubectlPlugin(kubeconfig string, args ...string) (string, error) {
	_, kubectl := Binaries(s.t)
	cmd := exec.Command(kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"),
		"KUBECACHEDIR="+filepath.Join(s.RootDir, "kubecache"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// KubectlErr runs kubectl with stdin and returns output and error.
func (s *Server) KubectlErr(cluster, stdin string, args ...string) (string, error) {
	_, kubectl := Binaries(s.t)
	full := append([]string{"--kubeconfig", s.Kubeconfig, "--server", s.URL() + "/clusters/" + cluster}, args...)
	cmd := exec.Command(kubectl, full...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(s.RootDir, "kubecache"))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// Eventually polls cond until it returns true or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
}

// CreateWorkspaces creates, as the admin, every workspace on the way to each
// path (root:a:b creates a in root, then b in root:a) and waits until each is
// Ready.
func (s *Server) CreateWorkspaces(paths ...string) {
	s.t.Helper()
	for _, p := range paths {
		segs := strings.Split(p, ":")
		for i := 1; i < len(segs); i++ {
			parent := strings.Join(segs[:i], ":")
			s.createWorkspace(parent, segs[i])
		}
	}
}

func (s *Server) createWorkspace(parent, name string) {
	s.t.Helper()
	dyn, err := dynamic.NewForConfig(s.Config(parent))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := tenancy.CreateWorkspace(context.Background(), dyn, name, "", true, 30*time.Second); err != nil {
		s.t.Fatalf("creating workspace %s in %s: %v", name, parent, err)
	}
}

// StartReplica starts a second kcp on the same datastore, sharing the CA,
// admin credentials and service-account key of s (as hosted replicas must),
// with its own root directory, port and serving certificate.
func StartReplica(t testing.TB, s *Server) *Server {
	t.Helper()
	r := newServer(t, s.Datastore, s.Args, s.RootDir)
	r.Start()
	return r
}

// StartReplicasTogether starts n replicas on one datastore at the same
// instant, as a deployment's pods start on a fresh database: every one of
// them creates, migrates and bootstraps what it finds missing at the same
// time as the others. They share the PKI (CA, admin and service-account
// keys) of a server that ran once on a throwaway SQLite file, so the
// datastore is untouched until they start.
func StartReplicasTogether(t testing.TB, datastore string, n int, extraArgs ...string) []*Server {
	t.Helper()
	pki := StartServer(t, "", extraArgs...)
	pki.Stop()
	var servers []*Server
	for range n {
		servers = append(servers, newServer(t, datastore, extraArgs, pki.RootDir))
	}
	for _, r := range servers {
		r.launch()
	}
	for _, r := range servers {
		r.ready()
	}
	return servers
}

// copyPKI copies what replicas of one installation share.
func copyPKI(t testing.TB, from, to string) {
	t.Helper()
	for _, f := range []string{"ca.crt", "ca.key", "admin.crt", "admin.key", "service-account.key"} {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Kill stops the process at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pid is the process id of the running server (0 when stopped).
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Terminate sends SIGTERM and returns how long the process took to exit, or
// an error if it did not exit within limit (it is then killed).
func (s *Server) Terminate(limit time.Duration) (time.Duration, error) {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0, fmt.Errorf("server is not running")
	}
	start := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	defer func() { s.cmd = nil }()
	select {
	case <-s.done:
		return time.Since(start), nil
	case <-time.After(limit):
		s.cmd.Process.Kill()
		<-s.done
		return time.Since(start), fmt.Errorf("kcp did not exit within %s of SIGTERM", limit)
	}
}

// WaitEstablished runs kubectl wait --for=condition=Established on the CRDs
// ("crd/NAME" arguments, or "crd --all") once: a new CRD has conditions from
// its first version, so the wait must not fail at once.
func (s *Server) WaitEstablished(cluster string, crd ...string) {
	s.t.Helper()
	args := append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, crd...)
	if out, err := s.KubectlErr(cluster, "", args...); err != nil {
		s.t.Fatalf("waiting for %v to be Established in %s: %v\n%s", crd, cluster, err, out)
	}
}

// WriteFile writes content to a file called name in the test's temporary
// directory and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// MustContain fails the test unless out holds every one of wants; what
// names the output in the failure.
func MustContain(t testing.TB, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("%s: want %q in:\n%s", what, w, out)
		}
	}
}

// MustNotContain fails the test if out holds any of unwanted.
func MustNotContain(t testing.TB, what, out string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(out, w) {
			t.Fatalf("%s: did not want %q in:\n%s", what, w, out)
		}
	}
}

// NamespacedCRD is a CustomResourceDefinition with one version, v1, whose
// openAPIV3Schema is schema (YAML flow style).
func NamespacedCRD(group, plural, kind, schema string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[2]s.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: %[2]s, kind: %[3]s}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: %[4]s}}
`, group, plural, kind, schema)
}

// NamespacedCRDWithStatus is a CRD example.com/v1 with a status
// subresource and the given spec properties.
func NamespacedCRDWithStatus(plural, kind, specProps string) string {
	return strings.Replace(NamespacedCRD("example.com", plural, kind,
		"{type: object, properties: {spec: {type: object, properties: {"+specProps+"}}, status: {type: object, properties: {phase: {type: string}}}}}"),
		"storage: true,", "storage: true, subresources: {status: {}},", 1)
}

// GrantAccess lets user enter the given workspaces of parent (the verb
// "access" on workspaces/content, by a ClusterRole and ClusterRoleBinding
// named <user>-access in parent); what the user may do inside is up to
// each workspace's own RBAC.
func (s *Server) GrantAccess(parent, user string, workspaces ...string) {
	s.t.Helper()
	grant := fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s-access}
rules:
- {apiGroups: [tenancy.kcp.io], resources: [workspaces/content], resourceNames: [%[2]s], verbs: [access]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s-access}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s-access}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: %[1]s}]
`, user, strings.Join(workspaces, ", "))
	if out, err := s.KubectlErr(parent, grant, "apply", "-f", "-"); err != nil {
		s.t.Fatalf("granting %s access to %v in %s: %v\n%s", user, workspaces, parent, err, out)
	}
}
