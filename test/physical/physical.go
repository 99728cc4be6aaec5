// Package physical starts real Kubernetes clusters as local processes for
// tests and benchmarks of the multi-cluster half of kcp: upstream
// kube-apiserver, kube-controller-manager and kube-scheduler built from the
// pinned k8s.io/kubernetes, the project's embedded kine (kineserver) as the
// datastore, and KWOK faking nodes so that Pods run and Deployments become
// Available without a kubelet or images. Binaries are built once per pinned
// version into a cache directory. Every process is ours: a cluster dies with
// Kill and comes back with Start on the same directory.
package physical

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"

	"github.com/kcpsql/kcp/server/pki"
)

// KubernetesVersion is the pinned upstream version the binaries are built from.
const KubernetesVersion = "v1.37.2"

// CacheDir is where built binaries are kept, one directory per version.
func CacheDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "kcp-bench", KubernetesVersion)
}

var buildMu sync.Mutex

// Build builds a main package of our module graph into CacheDir: once for a
// package outside this module (the cache is per pinned version), on every
// call for one of ours ("./..."; go build is incremental).
func Build(name, pkg string, log func(string, ...any)) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	out := filepath.Join(CacheDir(), name)
	if _, err := os.Stat(out); err == nil && !strings.HasPrefix(pkg, "./") {
		return out, nil
	}
	log("building %s from %s (minutes on a cold cache) ...", name, pkg)
	// Built under a temporary name and renamed: test binaries of several
	// packages may build the same program at once.
	tmp := fmt.Sprintf("%s.tmp-%d", out, os.Getpid())
	cmd := exec.Command("go", "build", "-ldflags", versionLDFlags(), "-o", tmp, pkg)
	cmd.Dir = moduleRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return out, os.Rename(tmp, out)
}

func versionLDFlags() string {
	var f []string
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		f = append(f, "-X "+p+".gitVersion="+KubernetesVersion, "-X "+p+".gitMajor=1", "-X "+p+".gitMinor=37", "-X "+p+".gitTreeState=clean")
	}
	return "-s -w " + strings.Join(f, " ")
}

// moduleRoot finds the directory of go.mod above the working directory.
func moduleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}

// Binaries are the programs a cluster runs.
type Binaries struct {
	APIServer, ControllerManager, Scheduler, Kwok, Kine string
}

// EnsureBinaries builds whatever is missing.
func EnsureBinaries(log func(string, ...any)) (Binaries, error) {
	var b Binaries
	var err error
	for _, x := range []struct {
		out       *string
		name, pkg string
	}{
		{&b.APIServer, "kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"},
		{&b.ControllerManager, "kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"},
		{&b.Scheduler, "kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"},
		{&b.Kwok, "kwok", "sigs.k8s.io/kwok/cmd/kwok"},
		{&b.Kine, "kineserver", "./test/bench/kineserver"},
	} {
		if *x.out, err = Build(x.name, x.pkg, log); err != nil {
			return b, err
		}
	}
	return b, nil
}

// Options say what to start.
type Options struct {
	// Name names the cluster (its nodes are <Name>-node-<i>).
	Name string
	// Dir holds its state; the same Dir restarts it with its objects.
	Dir string
	// Nodes is the number of fake nodes (default 3), each with CPU and
	// Memory allocatable (default 32 cores, 256Gi).
	Nodes       int
	CPU, Memory string
	// Labels go on every node.
	Labels map[string]string
	// Metrics: the cluster serves metrics.k8s.io (kwok's simulated
	// kubelet resource metrics scraped by metrics-server; metrics.go).
	Metrics bool
	// Log receives progress lines.
	Log func(string, ...any)
}

// Cluster is a running physical cluster.
type Cluster struct {
	Name string
	Dir  string
	// Port is the API server's (https://127.0.0.1:Port).
	Port int
	// Kubeconfig authenticates as system:masters.
	Kubeconfig string
	// KubeletPort is kwok's kubelet endpoint (logs, exec, attach,
	// port-forward of every node, on 127.0.0.1).
	KubeletPort int
	// MetricsServerPort is metrics-server's (Options.Metrics).
	MetricsServerPort int

	opts  Options
	bins  Binaries
	procs []*proc
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	done   chan struct{}
	stdout *os.File
}

// Start starts a cluster (or restarts one on an existing Dir) and waits
// until its nodes are Ready and it accepts Pods.
func Start(ctx context.Context, bins Binaries, opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.CPU == "" {
		opts.CPU = "32"
	}
	if opts.Memory == "" {
		opts.Memory = "256Gi"
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	c := &Cluster{Name: opts.Name, Dir: opts.Dir, opts: opts, bins: bins}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	// The port is kept across restarts: clients and kubeconfigs name it.
	portFile := filepath.Join(opts.Dir, "port")
	if b, err := os.ReadFile(portFile); err == nil {
		fmt.Sscan(string(b), &c.Port)
	} else {
		if c.Port, err = freePort(); err != nil {
			return nil, err
		}
		os.WriteFile(portFile, []byte(fmt.Sprint(c.Port)), 0o600)
	}
	kubeletPortFile := filepath.Join(opts.Dir, "kubelet-port")
	if b, err := os.ReadFile(kubeletPortFile); err == nil {
		fmt.Sscan(string(b), &c.KubeletPort)
	} else {
		if c.KubeletPort, err = freePort(); err != nil {
			return nil, err
		}
		os.WriteFile(kubeletPortFile, []byte(fmt.Sprint(c.KubeletPort)), 0o600)
	}
	if err := c.start(ctx); err != nil {
		c.Kill()
		return nil, fmt.Errorf("physical cluster %s: %v", c.Name, err)
	}
	return c, nil
}

func (c *Cluster) files() pki.Files { return pki.Files{Dir: filepath.Join(c.Dir, "pki")} }

func (c *Cluster) start(ctx context.Context) error {
	start := time.Now()
	server := fmt.Sprintf("https://127.0.0.1:%d", c.Port)
	f := c.files()
	if err := pki.Ensure(f, []string{"127.0.0.1", "localhost"}, server); err != nil {
		return err
	}
	// pki writes kcp's kubeconfig (root context under /clusters/root);
	// a physical cluster is reached at the bare URL ("base").
	cfg, err := clientcmd.LoadFromFile(f.AdminKubeconfig())
	if err != nil {
		return err
	}
	cfg.CurrentContext = "base"
	c.Kubeconfig = filepath.Join(c.Dir, c.Name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, c.Kubeconfig); err != nil {
		return err
	}

	kineDir := filepath.Join(c.Dir, "kine")
	os.MkdirAll(kineDir, 0o700)
	kp, err := c.run("kine", nil, c.bins.Kine, "-dir", kineDir)
	if err != nil {
		return err
	}
	endpoint, err := kp.firstLine(30 * time.Second)
	if err != nil {
		return fmt.Errorf("kineserver: %v", err)
	}
	var extra []string
	if c.opts.Metrics {
		if extra, err = c.frontProxyFlags(); err != nil {
			return err
		}
	}
	if _, err := c.run("kube-apiserver", nil, c.bins.APIServer, append(extra,
		"--etcd-servers="+endpoint, "--etcd-prefix=/registry",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", c.Port),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--tls-cert-file="+f.ServingCert(), "--tls-private-key-file="+f.ServingKey(),
		"--client-ca-file="+f.CACert(), "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+f.ServiceAccountKey(), "--service-account-signing-key-file="+f.ServiceAccountKey(),
		"--service-cluster-ip-range=10.96.0.0/16", "--enable-priority-and-fairness=false", "--profiling=false",
		// As kubeadm and kind set it: SyncTargets decide what tenants may run.
		"--allow-privileged=true",
		"--default-not-ready-toleration-seconds=30", "--default-unreachable-toleration-seconds=30",
		// Logs, exec, attach and port-forward reach kwok's kubelet
		// endpoint on the nodes' InternalIP (127.0.0.1, kwok --node-ip);
		// kwok serves a self-signed certificate, which kube-apiserver
		// accepts without --kubelet-certificate-authority.
		"--kubelet-preferred-address-types=InternalIP",
	)...); err != nil {
		return err
	}
	client, err := c.Client()
	if err != nil {
		return err
	}
	if err := poll(ctx, 60*time.Second, func() error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("kube-apiserver not ready: %v\n%s", err, c.LogTail("kube-apiserver", 20))
	}
	if _, err := c.run("kube-controller-manager", nil, c.bins.ControllerManager,
		"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0", "--controllers=*",
		"--service-account-private-key-file="+f.ServiceAccountKey(), "--root-ca-file="+f.CACert(),
		"--node-monitor-grace-period=20s", "--kube-api-qps=1000", "--kube-api-burst=2000",
	); err != nil {
		return err
	}
	if _, err := c.run("kube-scheduler", nil, c.bins.Scheduler,
		"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0", "--kube-api-qps=1000", "--kube-api-burst=2000",
	); err != nil {
		return err
	}
	debugging, err := c.debuggingConfig(ctx, client)
	if err != nil {
		return err
	}
	docs := []string{nodefast.DefaultNodeInit, nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podReadyStage(podfast.DefaultPodReady), podfast.DefaultPodComplete, podfast.DefaultPodDelete, debugging}
	if c.opts.Metrics {
		docs = append(docs, kwokMetricsConfig()...)
	}
	stages := strings.Join(docs, "\n---\n")
	kwokConfig := filepath.Join(c.Dir, "kwok.yaml")
	if err := os.WriteFile(kwokConfig, []byte(stages), 0o600); err != nil {
		return err
	}
	// kwok reads ~/.kwok/kwok.yaml first: give it a home of its own.
	if _, err := c.run("kwok", []string{"HOME=" + c.Dir}, c.bins.Kwok,
		"--kubeconfig="+c.Kubeconfig, "--config="+kwokConfig,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
		fmt.Sprintf("--node-port=%d", c.KubeletPort), fmt.Sprintf("--server-address=127.0.0.1:%d", c.KubeletPort),
		"--enable-crds=Logs",
	); err != nil {
		return err
	}
	if err := c.ensureNodes(ctx, client); err != nil {
		return err
	}
	if err := poll(ctx, 60*time.Second, func() error {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				return fmt.Errorf("node %s not Ready", n.Name)
			}
		}
		_, err = client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("not ready for workloads: %v", err)
	}
	if c.opts.Metrics {
		if err := c.startMetricsServer(ctx); err != nil {
			return err
		}
	}
	c.opts.Log("physical cluster %s ready at https://127.0.0.1:%d in %s", c.Name, c.Port, time.Since(start).Round(time.Millisecond))
	return nil
}

func (c *Cluster) ensureNodes(ctx context.Context, client kubernetes.Interface) error {
	for i := 0; i < c.opts.Nodes; i++ {
		name := fmt.Sprintf("%s-node-%d", c.Name, i)
		labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
		for k, v := range c.opts.Labels {
			labels[k] = v
		}
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(c.opts.CPU),
			corev1.ResourceMemory: resource.MustParse(c.opts.Memory),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		annotations := map[string]string{"kwok.x-k8s.io/node": "fake"}
		if c.opts.Metrics {
			for k, v := range nodeMetricsAnnotations(name) {
				annotations[k] = v
			}
		}
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
			Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// AddNodes adds n fake nodes like the others (a capacity change); they
// stay across restarts.
func (c *Cluster) AddNodes(ctx context.Context, n int) error {
	client, err := c.Client()
	if err != nil {
		return err
	}
	c.opts.Nodes += n
	return c.ensureNodes(ctx, client)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// RESTConfig is a system:masters client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	return cfg, nil
}

// Client is a system:masters clientset.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Stop stops every process, newest first (SIGTERM, then SIGKILL after 10 s).
func (c *Cluster) Stop() { c.stop(false) }

// Kill kills every process at once, as a dying machine would.
func (c *Cluster) Kill() { c.stop(true) }

// Restart starts the cluster again on its directory and port, with its state.
func (c *Cluster) Restart(ctx context.Context) error {
	c.Stop()
	if err := c.start(ctx); err != nil {
		c.Kill()
		return err
	}
	return nil
}

func (c *Cluster) stop(kill bool) {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if kill {
			p.cmd.Process.Kill()
		} else {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.procs = nil
}

// LogTail is the end of one component's log.
func (c *Cluster) LogTail(component string, n int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, component+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) run(name string, env []string, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(c.Dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), env...)
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	if name == "kine" {
		// kineserver prints its endpoint on stdout.
		r, w, err := os.Pipe()
		if err != nil {
			logf.Close()
			return nil, err
		}
		cmd.Stdout = w
		p.stdout = r
		defer w.Close()
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %v", name, err)
	}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	c.procs = append(c.procs, p)
	return p, nil
}

func (p *proc) firstLine(timeout time.Duration) (string, error) {
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := bufio.NewReader(p.stdout).ReadString('\n')
		ch <- res{strings.TrimSpace(l), err}
	}()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-time.After(timeout):
		return "", fmt.Errorf("no output within %s", timeout)
	}
}

func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
