package multicluster

import (
	"archive/zip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// binaries are the pinned upstream binaries the physical clusters run
// (built once, reused by every test).
func binaries(t *testing.T) physical.Binaries {
	t.Helper()
	bins, err := physical.EnsureBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return bins
}

// startPhysical starts physical clusters side by side; they stop with the
// test.
func startPhysical(t *testing.T, bins physical.Binaries, names ...string) map[string]*physical.Cluster {
	t.Helper()
	return startPhysicalWith(t, bins, physical.Options{}, names...)
}

// startPhysicalWith starts physical clusters with options (Name, Dir and
// Log are set per cluster).
func startPhysicalWith(t *testing.T, bins physical.Binaries, opts physical.Options, names ...string) map[string]*physical.Cluster {
	t.Helper()
	pcs := map[string]*physical.Cluster{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.Name, o.Dir, o.Log = name, t.TempDir(), t.Logf
			pc, err := physical.Start(context.Background(), bins, o)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			pcs[name] = pc
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, pc := range pcs {
		t.Cleanup(pc.Stop)
	}
	if t.Failed() {
		t.FailNow()
	}
	return pcs
}

// adminIn is a copy of the admin kubeconfig whose current workspace is ws
// (what kubectl ws use leaves behind).
func adminIn(t *testing.T, s *framework.Server, ws string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admin.kubeconfig")
	raw, err := os.ReadFile(s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := s.KubectlPlugin(p, "kcp", "ws", "use", ws); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return p
}

// syncerProc is bin/syncer for one SyncTarget, run as a process.
type syncerProc struct {
	t          *testing.T
	kubeconfig string
	target     string
	downstream string
	extra      []string
	cmd        *exec.Cmd
}

// register runs kubectl kcp workload sync for a physical cluster with the
// admin kubeconfig of the location workspace, and starts its syncer (with
// extra flags); the syncer stops with the test.
func register(t *testing.T, s *framework.Server, admin, name, labels string, pc *physical.Cluster, extra ...string) *syncerProc {
	t.Helper()
	return registerWith(t, s, admin, name, []string{"--labels", labels}, pc, extra...)
}

// registerWith is register with the plugin's flags given.
func registerWith(t *testing.T, s *framework.Server, admin, name string, pluginFlags []string, pc *physical.Cluster, extra ...string) *syncerProc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), name+"-syncer.kubeconfig")
	args := append([]string{"kcp", "workload", "sync", name, "--kcp-kubeconfig-out", cfg}, pluginFlags...)
	if out, err := s.KubectlPlugin(admin, args...); err != nil {
		t.Fatalf("kubectl kcp workload sync %s: %v\n%s", name, err, out)
	}
	p := &syncerProc{t: t, kubeconfig: cfg, target: name, downstream: pc.Kubeconfig, extra: extra}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *syncerProc) start() {
	args := append([]string{"--kcp-kubeconfig", p.kubeconfig, "--sync-target", p.target, "--kubeconfig", p.downstream, "--heartbeat-interval", "1s"}, p.extra...)
	p.cmd = exec.Command(filepath.Join(framework.RepoRoot(), "bin", "syncer"), args...)
	logf, _ := os.OpenFile(p.kubeconfig+".log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *syncerProc) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// waitTargetsReady waits until the named SyncTargets of a workspace are
// Ready.
func waitTargetsReady(t *testing.T, s *framework.Server, workspace string, names ...string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("SyncTargets %v Ready", names), func() (bool, string) {
		out := s.Kubectl(workspace, "get", "synctargets", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		for _, n := range names {
			if !strings.Contains(" "+out, " "+n+"=True") {
				return false, out
			}
		}
		return true, out
	})
}

// moduleDir extracts one directory of a Go module's zip into a temporary
// directory and returns its path.
func moduleDir(t *testing.T, module, dir string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, _ := cmd.Output()
	var m struct{ Zip, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Zip == "" {
		t.Fatalf("go mod download %s (needs the Go module proxy): %v\n%s", module, err, out)
	}
	zr, err := zip.OpenReader(m.Zip)
	if err != nil {
		t.Fatalf("%s: %v (%s)", m.Zip, err, m.Error)
	}
	defer zr.Close()
	dest := t.TempDir()
	prefix := module + "/" + dir + "/"
	for _, f := range zr.File {
		rel, ok := strings.CutPrefix(f.Name, prefix)
		if !ok || strings.HasSuffix(f.Name, "/") || strings.Contains(rel, "..") {
			continue
		}
		path := filepath.Join(dest, rel)
		os.MkdirAll(filepath.Dir(path), 0o755)
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dest
}

// placeAll places every namespace of a workspace on the SyncTargets of a
// location (a Placement selecting all namespaces) and waits until default
// is assigned to the location's target.
func placeAll(t *testing.T, s *framework.Server, workspace, location, target string) {
	t.Helper()
	s.Kubectl(workspace, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: everything}
spec: {locationWorkspace: "`+location+`", namespaceSelector: {}}
`))
	framework.Eventually(t, 30*time.Second, "the namespace to be assigned", func() (bool, string) {
		a := s.Kubectl(workspace, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == location+"/"+target, a
	})
}

// registerPush registers a physical cluster as a push-mode SyncTarget of
// workspace compute (kcp runs its syncer, with the cluster's kubeconfig
// from a Secret there); more spec lines are appended.
func registerPush(t *testing.T, s *framework.Server, compute, name, region string, pc *physical.Cluster, moreSpec string) {
	t.Helper()
	s.Kubectl(compute, "create", "secret", "generic", name+"-kubeconfig", "--from-file=kubeconfig="+pc.Kubeconfig)
	s.Kubectl(compute, "apply", "-f", framework.WriteFile(t, name+".yaml", fmt.Sprintf(`apiVersion: workload.kcp.io/v1alpha1
kind: SyncTarget
metadata: {name: %s, labels: {region: %s}}
spec: {push: {secretNamespace: default, secretName: %s-kubeconfig}%s}
`, name, region, name, moreSpec)))
}

// tunnelServer serves the syncer's tunnel handler for SyncTarget name of
// location over pc, as kcp reaches it through the tunnel; it stops with
// the test.
func tunnelServer(t *testing.T, pc *physical.Cluster, location, name string) *httptest.Server {
	t.Helper()
	cfg, err := pc.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	h, err := syncer.TunnelHandler(cfg, workload.TargetKey(location, name))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// tunnelRequest sends a request to a tunnel handler under test with a
// caller's credential (which must never be passed on) and returns the
// status code and body.
func tunnelRequest(t *testing.T, srv *httptest.Server, method, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer not-the-syncers")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
