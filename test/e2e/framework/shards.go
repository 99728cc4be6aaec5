package framework

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Installation is several shards of one workspace tree (kcp start
// --shards-file) and the front proxies before them.
type Installation struct {
	// Shards by name; the first is "root".
	Shards     map[string]*Server
	Proxies    []*FrontProxy
	ShardsFile string
}

// StartShards starts one shard per datastore (named root, then shard-1,
// shard-2, ...) sharing one CA and service-account key, and proxies front
// proxies, each shard started with extraArgs.
func StartShards(t testing.TB, datastores []string, proxies int, extraArgs ...string) *Installation {
	t.Helper()
	pki := StartServer(t, "")
	pki.Stop()
	in := &Installation{Shards: map[string]*Server{}}
	names := make([]string, len(datastores))
	var servers []*Server
	for i, ds := range datastores {
		names[i] = "root"
		if i > 0 {
			names[i] = fmt.Sprintf("shard-%d", i)
		}
		s := newServer(t, ds, nil, pki.RootDir)
		servers = append(servers, s)
		in.Shards[names[i]] = s
	}
	for range proxies {
		p := &FrontProxy{t: t, RootDir: t.TempDir(), Port: FreePort(t)}
		copyPKI(t, pki.RootDir, p.RootDir)
		p.Kubeconfig = filepath.Join(p.RootDir, "admin.kubeconfig")
		p.LogFile = filepath.Join(p.RootDir, "front-proxy.log")
		in.Proxies = append(in.Proxies, p)
		t.Cleanup(p.Stop)
	}
	var b strings.Builder
	b.WriteString("shards:\n")
	for i, s := range servers {
		fmt.Fprintf(&b, "- name: %s\n  url: %s\n", names[i], s.URL())
	}
	if len(in.Proxies) > 0 {
		fmt.Fprintf(&b, "externalURL: https://127.0.0.1:%d\n", in.Proxies[0].Port)
	}
	in.ShardsFile = WriteFile(t, "shards.yaml", b.String())
	for i, s := range servers {
		s.Args = append([]string{"--shards-file", in.ShardsFile, "--shard-name", names[i]}, extraArgs...)
		s.launch()
	}
	for _, s := range servers {
		s.ready()
	}
	for _, p := range in.Proxies {
		p.Start(in.ShardsFile)
	}
	return in
}

// FrontProxy is a running `kcp front-proxy`.
type FrontProxy struct {
	t          testing.TB
	RootDir    string
	Port       int
	Kubeconfig string
	LogFile    string
	cmd        *exec.Cmd
	done       chan error
}

// Start starts the proxy and waits until it knows every shard's workspaces.
func (p *FrontProxy) Start(shardsFile string) {
	p.t.Helper()
	kcp, _ := Binaries(p.t)
	logf, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(kcp, "front-proxy", "--shards-file", shardsFile, "--root-dir", p.RootDir, "--secure-port", fmt.Sprint(p.Port))
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan error, 1)
	go func() { p.done <- p.cmd.Wait(); logf.Close() }()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			p.t.Fatalf("front proxy exited: %v\n%s", err, p.LogTail(30))
		default:
		}
		if resp, err := client.Get(p.URL() + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("front proxy not ready after 60s\n%s", p.LogTail(30))
}

// Stop ends the proxy.
func (p *FrontProxy) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// LogTail returns the last n lines of the proxy's log.
func (p *FrontProxy) LogTail(n int) string { return logTail(p.LogFile, n) }

// URL is the proxy's base URL.
func (p *FrontProxy) URL() string { return fmt.Sprintf("https://127.0.0.1:%d", p.Port) }

// Config is the admin's client configuration for one workspace through
// the proxy (its admin.kubeconfig: the installation's admin certificate).
func (p *FrontProxy) Config(cluster string) *rest.Config {
	p.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
	if err != nil {
		p.t.Fatal(err)
	}
	cfg.Host = p.URL() + "/clusters/" + cluster
	cfg.QPS, cfg.Burst = 200, 400
	return cfg
}

// Client is an admin clientset for one workspace through the proxy.
func (p *FrontProxy) Client(cluster string) *kubernetes.Clientset {
	p.t.Helper()
	c, err := kubernetes.NewForConfig(p.Config(cluster))
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// KubectlErr runs the real kubectl through the proxy as the admin.
func (p *FrontProxy) KubectlErr(cluster, stdin string, args ...string) (string, error) {
	_, kubectl := Binaries(p.t)
	full := append([]string{"--kubeconfig", p.Kubeconfig, "--server", p.URL() + "/clusters/" + cluster}, args...)
	cmd := exec.Command(kubectl, full...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(p.RootDir, "kubecache"))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Kubectl is KubectlErr that fails the test on an error.
func (p *FrontProxy) Kubectl(cluster string, args ...string) string {
	p.t.Helper()
	out, err := p.KubectlErr(cluster, "", args...)
	if err != nil {
		p.t.Fatalf("kubectl %s (cluster %s, through the front proxy): %v\n%s", strings.Join(args, " "), cluster, err, out)
	}
	return out
}

// KubectlApply applies a manifest through the proxy.
func (p *FrontProxy) KubectlApply(cluster, manifest string) string {
	p.t.Helper()
	out, err := p.KubectlErr(cluster, manifest, "apply", "-f", "-")
	if err != nil {
		p.t.Fatalf("kubectl apply (cluster %s, through the front proxy): %v\n%s", cluster, err, out)
	}
	return out
}
