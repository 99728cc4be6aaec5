package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/physical"
)

var (
	failoverOnly = flag.Bool("failover", false, "run only the failover benchmark (three physical clusters, a divided Deployment, one cluster killed per run)")
	failoverRuns = flag.Int("failover-runs", 3, "kills per setting in the failover benchmark")
)

// failoverSetting is one set of kcp and syncer flags the failover benchmark
// runs with.
type failoverSetting struct {
	name      string
	kcpArgs   []string
	heartbeat string
}

var failoverSettings = []failoverSetting{
	{name: "defaults (heartbeat every 5 s, timeout 20 s, eviction delay 5 s)", heartbeat: "5s"},
	{name: "fast (heartbeat every 1 s, timeout 5 s, eviction delay 0 s)", heartbeat: "1s",
		kcpArgs: []string{"--synctarget-heartbeat-timeout=5s", "--placement-eviction-delay=0s"}},
}

type failoverResult struct {
	setting           string
	failover, rejoin  []time.Duration
	replicas, targets int
	// leastOnRejoin is the fewest available replicas the Deployment in kcp
	// had while a returning cluster got its share back (rebalancing keeps
	// the others' shares until it is available).
	leastOnRejoin int32
	// Measured once, with the first setting: a ConfigMap created in the
	// divided workspace until it exists on all three clusters, a scale
	// until every share is written downstream, and how fast namespaces of
	// new workspaces with a Placement get their three targets.
	createP50, createP99 time.Duration
	scaleP50, scaleP99   time.Duration
	placed               int
	placedIn             time.Duration
}

var placedWorkspaces = flag.Int("failover-placements", 1000, "workspaces with a Placement each, for the placement-decision rate in the failover benchmark (0 skips)")

// plugin runs kubectl-kcp with a kubeconfig.
func plugin(kubeconfig string, args ...string) error {
	cmd := exec.Command(filepath.Join(filepath.Dir(*kcpBin), "kubectl-kcp"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl kcp %v: %v\n%s", args, err, out)
	}
	return nil
}

// computeKubeconfig writes a copy of the server's admin kubeconfig into
// dir whose current workspace is root:compute (what kubectl ws use leaves).
func (s *server) computeKubeconfig(dir string) (string, error) {
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	raw, err := os.ReadFile(filepath.Join(s.dir, "admin.kubeconfig"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(kubeconfig, raw, 0o600); err != nil {
		return "", err
	}
	return kubeconfig, plugin(kubeconfig, "ws", "use", "root:compute")
}

// startSyncer runs bin/syncer for one SyncTarget; its log goes to dir.
func startSyncer(dir, target, kcpKubeconfig, downKubeconfig string, extra ...string) (*exec.Cmd, error) {
	logf, err := os.OpenFile(filepath.Join(dir, target+"-syncer.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kcp-kubeconfig", kcpKubeconfig, "--sync-target", target, "--kubeconfig", downKubeconfig}, extra...)
	bin := filepath.Join(filepath.Dir(*kcpBin), "syncer")
	if *syncSyncer != "" {
		bin = *syncSyncer
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	return cmd, cmd.Start()
}

func stopProcess(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// benchFailover: three physical clusters, a workspace whose Deployment is
// divided over all of them; per run one cluster's processes and syncer are
// killed, and the time until the Deployment is fully Available on the two
// left is measured, then the cluster comes back and the time until its
// share is Available there again (rebalancing when a cluster joins).
func benchFailover(log func(string, ...any)) ([]failoverResult, error) {
	bins, err := physical.EnsureBinaries(log)
	if err != nil {
		return nil, err
	}
	var out []failoverResult
	for _, setting := range failoverSettings {
		r, err := failoverWith(bins, setting, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", setting.name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func failoverWith(bins physical.Binaries, setting failoverSetting, log func(string, ...any)) (failoverResult, error) {
	const replicas = 6
	r := failoverResult{setting: setting.name, replicas: replicas, targets: 3, leastOnRejoin: replicas}
	tmp, err := os.MkdirTemp("", "kcp-bench-failover-")
	if err != nil {
		return r, err
	}
	if os.Getenv("KCP_BENCH_KEEP") == "" {
		defer os.RemoveAll(tmp)
	}
	ctx := context.Background()
	names := []string{"pc1", "pc2", "pc3"}
	pcs := map[string]*physical.Cluster{}
	down := map[string]*kubernetes.Clientset{}
	for _, n := range names {
		pc, err := physical.Start(ctx, bins, physical.Options{Name: n, Dir: filepath.Join(tmp, n), Log: log})
		if err != nil {
			return r, err
		}
		defer pc.Stop()
		pcs[n] = pc
		if down[n], err = pc.Client(); err != nil {
			return r, err
		}
	}
	s := &server{dir: filepath.Join(tmp, "kcp"), port: freePort(), extra: setting.kcpArgs}
	if _, err := s.start(); err != nil {
		return r, err
	}
	defer s.stop()
	if err := s.createWorkspaces([][2]string{{"root", "compute"}, {"root", "shop"}}); err != nil {
		return r, err
	}
	kubeconfig, err := s.computeKubeconfig(tmp)
	if err != nil {
		return r, err
	}
	syncers := map[string]*exec.Cmd{}
	syncerConfig := func(n string) string { return filepath.Join(tmp, n+"-syncer.kubeconfig") }
	runSyncer := func(n string) error {
		cmd, err := startSyncer(tmp, n, syncerConfig(n), pcs[n].Kubeconfig, "--heartbeat-interval", setting.heartbeat)
		syncers[n] = cmd
		return err
	}
	for _, n := range names {
		if err := plugin(kubeconfig, "workload", "sync", n, "--labels", "region=eu", "--kcp-kubeconfig-out", syncerConfig(n)); err != nil {
			return r, err
		}
		if err := runSyncer(n); err != nil {
			return r, err
		}
	}
	defer func() {
		for _, c := range syncers {
			stopProcess(c)
		}
	}()
	shop, err := s.client("root:shop")
	if err != nil {
		return r, err
	}
	ns := syncer.DownstreamNamespace(logicalcluster.Name("root:shop"), "default")
	// settled: web runs on exactly these clusters, each with a share that
	// is all Available, the shares summing to the replicas, and the
	// namespace assigned to them and no other.
	settled := func(clusters ...string) bool {
		n, err := shop.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if err != nil || strings.Count(n.Annotations[workload.AssignedTargetAnnotation], ",") != len(clusters)-1 {
			return false
		}
		var sum int32
		for _, c := range clusters {
			if !strings.Contains(n.Annotations[workload.AssignedTargetAnnotation], "/"+c) {
				return false
			}
			d, err := down[c].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas == 0 || d.Status.AvailableReplicas != *d.Spec.Replicas || d.Status.Replicas != *d.Spec.Replicas {
				return false
			}
			sum += *d.Spec.Replicas
		}
		return sum == replicas
	}
	waitUntil := func(what string, timeout time.Duration, ok func() bool) error {
		t0 := time.Now()
		for !ok() {
			if time.Since(t0) > timeout {
				return fmt.Errorf("%s: not after %s (logs in %s with KCP_BENCH_KEEP=1)", what, timeout, tmp)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	}
	if err := placeAndDeploy(s, "root:shop", map[string]interface{}{"allClusters": true, "mode": workload.ModeDivide}, replicas); err != nil {
		return r, err
	}
	if err := waitUntil("the namespace placed on three clusters", 2*time.Minute, func() bool {
		n, err := shop.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil && strings.Count(n.Annotations[workload.AssignedTargetAnnotation], ",") == 2
	}); err != nil {
		return r, err
	}
	if err := waitUntil("web Available on three clusters", 3*time.Minute, func() bool { return settled(names...) }); err != nil {
		return r, err
	}
	if setting.name == failoverSettings[0].name {
		if err := divideLatency(ctx, s, shop, down, ns, names, settled, &r, log); err != nil {
			return r, err
		}
	}
	for run := 0; run < *failoverRuns; run++ {
		victim := names[run%len(names)]
		var survivors []string
		for _, n := range names {
			if n != victim {
				survivors = append(survivors, n)
			}
		}
		t0 := time.Now()
		stopProcess(syncers[victim])
		pcs[victim].Kill()
		if err := waitUntil("web Available on the survivors", 5*time.Minute, func() bool { return settled(survivors...) }); err != nil {
			return r, err
		}
		r.failover = append(r.failover, time.Since(t0))
		log("  %s: %s killed, web %d/%d Available on %v after %s", setting.name, victim, replicas, replicas, survivors, time.Since(t0).Round(100*time.Millisecond))
		if err := pcs[victim].Restart(ctx); err != nil {
			return r, err
		}
		t1 := time.Now()
		if err := runSyncer(victim); err != nil {
			return r, err
		}
		if err := waitUntil(victim+" back with its share", 5*time.Minute, func() bool {
			if d, err := shop.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err == nil {
				r.leastOnRejoin = min(r.leastOnRejoin, d.Status.AvailableReplicas)
			}
			return settled(names...)
		}); err != nil {
			return r, err
		}
		r.rejoin = append(r.rejoin, time.Since(t1))
		log("  %s: %s back, shares on three clusters again after %s", setting.name, victim, time.Since(t1).Round(100*time.Millisecond))
	}
	return r, nil
}

func printFailover(rs []failoverResult) {
	for _, r := range rs {
		if r.createP50 > 0 {
			fmt.Printf("| three clusters, Divide | p50 | p99 |\n|---|---|---|\n| create in the workspace -> exists on all three | %s | %s |\n| kubectl scale -> every share written downstream | %s | %s |\n\n",
				r.createP50.Round(100*time.Microsecond), r.createP99.Round(100*time.Microsecond), r.scaleP50.Round(100*time.Microsecond), r.scaleP99.Round(100*time.Microsecond))
		}
		if r.placed > 0 {
			fmt.Printf("Placement decisions: %d workspaces with a Placement each, every namespace on its three targets %s after their creation began (%.0f per second)\n\n",
				r.placed, r.placedIn.Round(10*time.Millisecond), float64(r.placed)/r.placedIn.Seconds())
		}
	}
	fmt.Println("| setting | kills | kill -> Available on the survivors, p50 / max | cluster back -> its share Available, p50 / max | fewest available in kcp while it rejoined |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Printf("| %s | %d | %s / %s | %s / %s | %d of %d |\n", r.setting, len(r.failover),
			median(r.failover), maxDuration(r.failover), median(r.rejoin), maxDuration(r.rejoin), r.leastOnRejoin, r.replicas)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(100 * time.Millisecond)
}

func maxDuration(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m.Round(100 * time.Millisecond)
}

// divideLatency measures, with three clusters and a divided Deployment,
// the time from a create in the workspace until the object exists on every
// cluster, and from kubectl scale until every cluster has its new share;
// then the rate at which the placement controller assigns the namespaces
// of many new workspaces with a Placement each.
func divideLatency(ctx context.Context, s *server, shop *kubernetes.Clientset, down map[string]*kubernetes.Clientset, ns string, names []string,
	settled func(...string) bool, r *failoverResult, log func(string, ...any)) error {
	const samples = 100
	var creates, scales []time.Duration
	for i := 0; i < samples; i++ {
		name := fmt.Sprintf("lat-%d", i)
		t0 := time.Now()
		if _, err := shop.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		for _, n := range names {
			for {
				if _, err := down[n].CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					break
				}
				if time.Since(t0) > 30*time.Second {
					return fmt.Errorf("ConfigMap %s not on %s after 30 s", name, n)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		creates = append(creates, time.Since(t0))
	}
	for i := 0; i < 20; i++ {
		want := int32(9) // 9, 6, 9, ...
		if i%2 == 1 {
			want = 6
		}
		t0 := time.Now()
		if err := scaleTo(ctx, shop, want); err != nil {
			return err
		}
		for {
			var sum int32
			for _, n := range names {
				if d, err := down[n].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{}); err == nil && d.Spec.Replicas != nil {
					sum += *d.Spec.Replicas
				}
			}
			if sum == want {
				break
			}
			if time.Since(t0) > 30*time.Second {
				return fmt.Errorf("shares of %d replicas not downstream after 30 s", want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		scales = append(scales, time.Since(t0))
	}
	// Back to the 6 replicas the failover runs expect, settled.
	if err := scaleTo(ctx, shop, 6); err != nil {
		return err
	}
	for t0 := time.Now(); !settled(names...); time.Sleep(200 * time.Millisecond) {
		if time.Since(t0) > 3*time.Minute {
			return fmt.Errorf("web not settled at 6 replicas after 3 minutes")
		}
	}
	r.createP50, r.createP99 = percentile(creates, 0.5), percentile(creates, 0.99)
	r.scaleP50, r.scaleP99 = percentile(scales, 0.5), percentile(scales, 0.99)
	log("three clusters, Divide: create -> on all three p50 %s p99 %s; scale -> every share downstream p50 %s p99 %s",
		r.createP50, r.createP99, r.scaleP50, r.scaleP99)

	// Placement decisions: workspaces with a Placement each (no workload),
	// until every one's default namespace names its three targets.
	n := *placedWorkspaces
	if n == 0 {
		return nil
	}
	var pairs [][2]string
	for i := 0; i < n; i++ {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("placed-%d", i)})
	}
	if err := s.createWorkspaces(pairs); err != nil {
		return err
	}
	t0 := time.Now()
	if err := parallel(n, func(i int) error {
		cfg, err := s.config(fmt.Sprintf("root:placed-%d", i))
		if err != nil {
			return err
		}
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		pl := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": workload.Group + "/" + workload.Version, "kind": "Placement", "metadata": map[string]interface{}{"name": "all"},
			"spec": map[string]interface{}{"locationWorkspace": "root:compute", "namespaceSelector": map[string]interface{}{}, "allClusters": true, "mode": workload.ModeDivide},
		}}
		_, err = d.Resource(workload.PlacementsResource).Create(ctx, pl, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	wild, err := s.client("*")
	if err != nil {
		return err
	}
	for {
		list, err := wild.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		done := 0
		if err == nil {
			for _, item := range list.Items {
				if item.Name == "default" && strings.Count(item.Annotations[workload.AssignedTargetAnnotation], ",") == 2 {
					done++
				}
			}
		}
		if done >= n+1 { // the placed workspaces and root:shop
			break
		}
		if time.Since(t0) > 10*time.Minute {
			return fmt.Errorf("only %d of %d namespaces placed after 10 minutes", done, n+1)
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.placed, r.placedIn = n, time.Since(t0)
	log("%d workspaces with a Placement each: every namespace assigned to three targets %s after their creation began (%.0f decisions/s)",
		n, r.placedIn.Round(10*time.Millisecond), float64(n)/r.placedIn.Seconds())
	return nil
}

// scaleTo sets web's replicas with a merge patch (no resourceVersion: kcp
// writes the Deployment's status all the while).
func scaleTo(ctx context.Context, c *kubernetes.Clientset, replicas int32) error {
	_, err := c.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)), metav1.PatchOptions{})
	return err
}
