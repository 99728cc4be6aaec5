package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	shardsOnly      = flag.Bool("shards", false, "only measure shards behind a front proxy: the proxy's overhead on get, list and watch, and workspace creations per second with 1, 2 and 3 shards (each on a PostgreSQL database of its own, -postgres)")
	shardWorkspaces = flag.Int("shard-workspaces", 600, "workspaces created per shard count (-shards)")
	shardSamples    = flag.Int("shard-samples", 300, "requests per latency measurement (-shards)")
)

// shardSet is several shards of one installation and a front proxy.
type shardSet struct {
	shards  []*server
	names   []string
	proxy   *exec.Cmd
	proxyD  string
	proxyP  int
	cleanup []func()
}

func (s *shardSet) stop() {
	if s.proxy != nil {
		s.proxy.Process.Signal(os.Interrupt)
		s.proxy.Wait()
	}
	for _, sh := range s.shards {
		if sh.cmd != nil {
			sh.stop()
		}
	}
	for _, f := range s.cleanup {
		f()
	}
}

// startShards starts n shards on fresh PostgreSQL databases, sharing one
// CA, and a front proxy.
func startShards(n int, log func(string, ...any)) (*shardSet, error) {
	tmp, err := os.MkdirTemp("", "kcp-bench-shards-")
	if err != nil {
		return nil, err
	}
	set := &shardSet{cleanup: []func(){func() { os.RemoveAll(tmp) }}}
	// A throwaway start makes the installation's CA and keys.
	pki, stopPKI, err := startInTemp("shards-pki", "")
	if err != nil {
		return set, err
	}
	set.proxyD, set.proxyP = filepath.Join(tmp, "proxy"), freePort()
	var b strings.Builder
	b.WriteString("shards:\n")
	for i := range n {
		name := "root"
		if i > 0 {
			name = fmt.Sprintf("shard-%d", i)
		}
		ds, drop, err := freshPostgres()
		if err != nil {
			stopPKI()
			return set, err
		}
		set.cleanup = append(set.cleanup, drop)
		sh := &server{dir: filepath.Join(tmp, name), port: freePort(), ds: ds}
		set.shards, set.names = append(set.shards, sh), append(set.names, name)
		fmt.Fprintf(&b, "- {name: %s, url: 'https://127.0.0.1:%d'}\n", name, sh.port)
	}
	fmt.Fprintf(&b, "externalURL: https://127.0.0.1:%d\n", set.proxyP)
	dirs := []string{set.proxyD}
	for _, sh := range set.shards {
		dirs = append(dirs, sh.dir)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return set, err
		}
		if err := copyIdentity(pki.dir, d); err != nil {
			return set, err
		}
	}
	stopPKI()
	file := filepath.Join(tmp, "shards.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return set, err
	}
	for i, sh := range set.shards {
		sh.extra = []string{"--shards-file", file, "--shard-name", set.names[i]}
		if _, err := sh.start(); err != nil {
			return set, err
		}
	}
	bin := *kcpBin
	set.proxy = exec.Command(bin, "front-proxy", "--shards-file", file, "--root-dir", set.proxyD, "--secure-port", fmt.Sprint(set.proxyP))
	logf, _ := os.Create(set.proxyD + ".log")
	set.proxy.Stdout, set.proxy.Stderr = logf, logf
	if err := set.proxy.Start(); err != nil {
		return set, err
	}
	for t0 := time.Now(); time.Since(t0) < time.Minute; time.Sleep(50 * time.Millisecond) {
		if c, err := set.proxyClient("root"); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			cancel()
			if err == nil {
				log("%d shard(s) and a front proxy ready", n)
				return set, nil
			}
		}
	}
	return set, fmt.Errorf("front proxy not ready; see %s.log", set.proxyD)
}

func (s *shardSet) proxyConfig(cluster string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(s.proxyD, "admin.kubeconfig"))
	if err != nil {
		return nil, err
	}
	cfg.Host = fmt.Sprintf("https://127.0.0.1:%d/clusters/%s", s.proxyP, cluster)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg, nil
}

func (s *shardSet) proxyClient(cluster string) (*kubernetes.Clientset, error) {
	cfg, err := s.proxyConfig(cluster)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

type shardLatency struct {
	op                   string
	directP50, directP99 time.Duration
	proxyP50, proxyP99   time.Duration
}

type shardCreates struct {
	mode    string
	shards  int
	perSec  float64
	cpuSecs []float64 // per shard process, and the proxy last
}

func p50p99(d []time.Duration) (time.Duration, time.Duration) {
	return pct(d, 0.5), pct(d, 0.99)
}

// measure runs op n times and returns p50 and p99.
func measure(n int, op func() error) (time.Duration, time.Duration, error) {
	var d []time.Duration
	for range n {
		t0 := time.Now()
		if err := op(); err != nil {
			return 0, 0, err
		}
		d = append(d, time.Since(t0))
	}
	p50, p99 := p50p99(d)
	return p50, p99, nil
}

func benchProxyOverhead(set *shardSet, log func(string, ...any)) ([]shardLatency, error) {
	ctx := context.Background()
	direct, err := set.shards[0].client("root")
	if err != nil {
		return nil, err
	}
	via, err := set.proxyClient("root")
	if err != nil {
		return nil, err
	}
	ns := "proxy-bench"
	if _, err := direct.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for i := range 100 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}, Data: map[string]string{"k": strings.Repeat("v", 200)}}
		if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	var out []shardLatency
	for _, op := range []struct {
		name string
		f    func(*kubernetes.Clientset) error
	}{
		{"get a ConfigMap", func(c *kubernetes.Clientset) error {
			_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cm-042", metav1.GetOptions{})
			return err
		}},
		{"list 100 ConfigMaps", func(c *kubernetes.Clientset) error {
			_, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
	} {
		r := shardLatency{op: op.name}
		if r.directP50, r.directP99, err = measure(*shardSamples, func() error { return op.f(direct) }); err != nil {
			return nil, err
		}
		if r.proxyP50, r.proxyP99, err = measure(*shardSamples, func() error { return op.f(via) }); err != nil {
			return nil, err
		}
		log("%s: direct p50 %s p99 %s, through the proxy p50 %s p99 %s", r.op, r.directP50, r.directP99, r.proxyP50, r.proxyP99)
		out = append(out, r)
	}
	// Watch: from an update (written straight to the shard) to its event.
	r := shardLatency{op: "watch event after an update"}
	for i, c := range []*kubernetes.Clientset{direct, via} {
		w, err := c.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=cm-007"})
		if err != nil {
			return nil, err
		}
		var d []time.Duration
		for j := range *shardSamples {
			cm, err := direct.CoreV1().ConfigMaps(ns).Get(ctx, "cm-007", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			cm.Data["n"] = fmt.Sprint(j)
			t0 := time.Now()
			if _, err := direct.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				return nil, err
			}
			for ev := range w.ResultChan() {
				if got, ok := ev.Object.(*corev1.ConfigMap); ok && got.Data["n"] == fmt.Sprint(j) {
					break
				}
			}
			d = append(d, time.Since(t0))
		}
		w.Stop()
		p50, p99 := p50p99(d)
		if i == 0 {
			r.directP50, r.directP99 = p50, p99
		} else {
			r.proxyP50, r.proxyP99 = p50, p99
		}
	}
	log("%s: direct p50 %s p99 %s, through the proxy p50 %s p99 %s", r.op, r.directP50, r.directP99, r.proxyP50, r.proxyP99)
	return append(out, r), nil
}

func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b)[strings.LastIndex(string(b), ")")+2:])
	var u, s float64
	fmt.Sscanf(f[11], "%f", &u)
	fmt.Sscanf(f[12], "%f", &s)
	return (u + s) / 100
}

// createReady creates a workspace in parent and waits until it is Ready.
func createReady(ctx context.Context, c dynamic.ResourceInterface, name, shard string) error {
	ws := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace",
		"metadata": map[string]interface{}{"name": name},
	}}
	if shard != "" {
		ws.Object["spec"] = map[string]interface{}{"shard": shard}
	}
	if _, err := c.Create(ctx, ws, metav1.CreateOptions{}); err != nil {
		return err
	}
	for {
		got, err := c.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if p, _, _ := unstructured.NestedString(got.Object, "status", "phase"); p == "Ready" {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benchShardCreates creates workspaces through the proxy with -clients at
// once, each waited for until Ready. Mode "root": all in root (on the root
// shard), each naming a shard in turn, so that most are created across
// shards. Mode "orgs": one organization workspace per shard first, then
// the workspaces in the organizations in turn, naming no shard: each goes
// to its organization's shard, and only that shard works for it.
func benchShardCreates(set *shardSet, mode string, log func(string, ...any)) (shardCreates, error) {
	parents := make([]dynamic.ResourceInterface, len(set.shards))
	shardOf := func(i int) string { return set.names[i%len(set.names)] }
	for i := range set.shards {
		parent := "root"
		if mode == "orgs" {
			cfg, err := set.proxyConfig("root")
			if err != nil {
				return shardCreates{}, err
			}
			dc, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return shardCreates{}, err
			}
			if err := createReady(context.Background(), dc.Resource(workspacesGVR), fmt.Sprintf("org-%d", i), set.names[i]); err != nil {
				return shardCreates{}, err
			}
			parent = fmt.Sprintf("root:org-%d", i)
			shardOf = func(int) string { return "" }
		}
		cfg, err := set.proxyConfig(parent)
		if err != nil {
			return shardCreates{}, err
		}
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return shardCreates{}, err
		}
		parents[i] = dc.Resource(workspacesGVR)
	}
	total := *shardWorkspaces * len(set.shards)
	var next, failed atomic.Int64
	var firstErr atomic.Value
	before := make([]float64, len(set.shards)+1)
	for i, sh := range set.shards {
		before[i] = procCPU(sh.cmd.Process.Pid)
	}
	before[len(set.shards)] = procCPU(set.proxy.Process.Pid)
	t0 := time.Now()
	var wg sync.WaitGroup
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				if err := createReady(ctx, parents[i%len(parents)], fmt.Sprintf("ws-%05d", i), shardOf(i)); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	if n := failed.Load(); n > 0 {
		return shardCreates{}, fmt.Errorf("%d creates failed, first: %v", n, firstErr.Load())
	}
	r := shardCreates{mode: mode, shards: len(set.shards), perSec: float64(total) / el.Seconds()}
	for i, sh := range set.shards {
		r.cpuSecs = append(r.cpuSecs, procCPU(sh.cmd.Process.Pid)-before[i])
	}
	r.cpuSecs = append(r.cpuSecs, procCPU(set.proxy.Process.Pid)-before[len(set.shards)])
	log("%s, %d shard(s): %d workspaces Ready in %s, %.0f/s; CPU seconds per shard %v, proxy %.1f", mode, len(set.shards), total, el.Round(time.Millisecond), r.perSec, r.cpuSecs[:len(set.shards)], r.cpuSecs[len(set.shards)])
	return r, nil
}

func benchShards(log func(string, ...any)) error {
	set, err := startShards(1, log)
	if err != nil {
		set.stop()
		return err
	}
	lat, err := benchProxyOverhead(set, log)
	set.stop()
	if err != nil {
		return err
	}
	var creates []shardCreates
	for _, mode := range []string{"orgs", "root"} {
		for n := 1; n <= 3; n++ {
			set, err := startShards(n, log)
			if err != nil {
				set.stop()
				return err
			}
			r, err := benchShardCreates(set, mode, log)
			set.stop()
			if err != nil {
				return err
			}
			creates = append(creates, r)
		}
	}
	fmt.Printf("\nFront proxy overhead (one shard on PostgreSQL, %d requests each, one client; %s, %d cores):\n\n", *shardSamples, cpuModel(), runtime.NumCPU())
	fmt.Println("| request | direct p50 | direct p99 | through the proxy p50 | through the proxy p99 |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range lat {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", r.op, ms(r.directP50), ms(r.directP99), ms(r.proxyP50), ms(r.proxyP99))
	}
	fmt.Printf("\nWorkspace creations through the proxy (%d per shard, %d clients, each waiting for Ready). orgs: in one organization per shard, each new workspace on its parent's shard; root: all in root, naming each shard in turn (created across shards by the root shard):\n\n", *shardWorkspaces, *clients)
	fmt.Println("| parents | shards | workspaces/s | kcp CPU seconds per shard | proxy CPU seconds |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range creates {
		var per []string
		for _, c := range r.cpuSecs[:r.shards] {
			per = append(per, fmt.Sprintf("%.1f", c))
		}
		fmt.Printf("| %s | %d | %.0f | %s | %.1f |\n", r.mode, r.shards, r.perSec, strings.Join(per, " / "), r.cpuSecs[r.shards])
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
