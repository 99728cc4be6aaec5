package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/physical"
)

var (
	syncOnly       = flag.Bool("sync", false, "run only the multi-cluster sync benchmark (a real physical cluster, a syncer, -sync-workspaces placed workspaces)")
	syncWorkspaces = flag.String("sync-workspaces", "10,100,1000", "placed workspaces (one Deployment each) at which the syncer's goroutines and memory are measured")
	syncSamples    = flag.Int("sync-samples", 200, "objects per sync-latency measurement")
	syncSyncer     = flag.String("sync-syncer", "", "the syncer binary the sync benchmark runs (empty: the syncer beside -kcp); give an older build to compare")
)

type syncResult struct {
	registerToReady          time.Duration
	downP50, downP99         time.Duration
	upP50, upP99             time.Duration
	steps                    []syncStep
	kinds                    []kindLatency
	syncerBaseGo, kcpBaseGo  int
	syncerBaseRSS, kcpBaseMB float64
	// syncerBaseHeap: the syncer's live heap (MiB, after a GC).
	syncerBaseHeap float64
	// objBytes: the JSON size of one workspace's synced objects as kcp
	// serves them (the objects the syncer must hold upstream).
	objBytes int
}

type syncStep struct {
	workspaces        int
	syncerGo, kcpGo   int
	syncerRSS, kcpRSS float64
	syncerHeap        float64
	fill              time.Duration
	// projected: pods projected into the workspaces, after projectedIn.
	projected   int
	projectedIn time.Duration
}

// benchSync: register a physical cluster with the plugin and time it to
// Ready; place workspaces on it with a Deployment each, and measure the
// syncer (goroutines, RSS) and kcp as their number grows; then the latency
// of a create in a workspace until it exists downstream, and of a status
// change downstream until kcp shows it.
func benchSync(log func(string, ...any)) (syncResult, error) {
	var r syncResult
	bins, err := physical.EnsureBinaries(log)
	if err != nil {
		return r, err
	}
	tmp, err := os.MkdirTemp("", "kcp-bench-sync-")
	if err != nil {
		return r, err
	}
	if os.Getenv("KCP_BENCH_KEEP") == "" {
		defer os.RemoveAll(tmp)
	}
	ctx := context.Background()
	pc, err := physical.Start(ctx, bins, physical.Options{Name: "pc1", Dir: filepath.Join(tmp, "pc1"), Log: log})
	if err != nil {
		return r, err
	}
	defer pc.Stop()
	down, err := pc.Client()
	if err != nil {
		return r, err
	}
	s := &server{dir: filepath.Join(tmp, "kcp"), port: freePort()}
	if _, err := s.start(); err != nil {
		return r, err
	}
	defer s.stop()
	if err := s.createWorkspaces([][2]string{{"root", "compute"}}); err != nil {
		return r, err
	}

	// Registration: the plugin, then the syncer, until Ready.
	kubeconfig, err := s.computeKubeconfig(tmp)
	if err != nil {
		return r, err
	}
	syncerConfig := filepath.Join(tmp, "pc1-syncer.kubeconfig")
	debug := fmt.Sprintf("127.0.0.1:%d", freePort())
	t0 := time.Now()
	if err := plugin(kubeconfig, "workload", "sync", "pc1", "--labels", "region=eu", "--kcp-kubeconfig-out", syncerConfig); err != nil {
		return r, err
	}
	sy, err := startSyncer(tmp, "pc1", syncerConfig, pc.Kubeconfig, "--heartbeat-interval", "1s", "--debug-address", debug)
	if err != nil {
		return r, err
	}
	defer stopProcess(sy)
	cfg, err := s.config("root:compute")
	if err != nil {
		return r, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	for {
		obj, err := dyn.Resource(workload.SyncTargetsResource).Get(ctx, "pc1", metav1.GetOptions{})
		if err == nil && readyCondition(obj) == "True" {
			break
		}
		if time.Since(t0) > 2*time.Minute {
			return r, fmt.Errorf("SyncTarget pc1 not Ready after 2 minutes; see %s", filepath.Join(tmp, "pc1-syncer.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.registerToReady = time.Since(t0)
	log("registration to Ready: %s", r.registerToReady.Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	r.syncerBaseGo, r.syncerBaseRSS = syncerGoroutines(debug), rssMiB(sy.Process.Pid)
	r.syncerBaseHeap = syncerHeap(debug, 0)
	r.kcpBaseGo, r.kcpBaseMB = s.goroutines(), rssMiB(s.cmd.Process.Pid)

	// Placed workspaces, one Deployment each.
	created := 0
	for _, step := range strings.Split(*syncWorkspaces, ",") {
		var n int
		fmt.Sscan(step, &n)
		if n <= created {
			continue
		}
		start := time.Now()
		var pairs [][2]string
		for i := created; i < n; i++ {
			pairs = append(pairs, [2]string{"root", fmt.Sprintf("app-%d", i)})
		}
		if err := s.createWorkspaces(pairs); err != nil {
			return r, err
		}
		wsDone := time.Since(start)
		if err := parallel(n-created, func(i int) error {
			ws := fmt.Sprintf("root:app-%d", created+i)
			if err := placeAndDeploy(s, ws, nil, 1); err != nil {
				return err
			}
			if *syncApp {
				return deployApp(s, ws)
			}
			return nil
		}); err != nil {
			return r, err
		}
		log("  %d workspaces in %s, Placements and Deployments created after %s", n-created, wsDone.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		// Until every Deployment exists downstream.
		for {
			// From the physical cluster's watch cache, once a second, so that
			// counting does not load what is measured.
			deps, sts, jobs := appDownstream(ctx, down)
			if deps >= n && (!*syncApp || sts >= n && jobs >= n) {
				break
			}
			if time.Since(start) > 20*time.Minute {
				return r, fmt.Errorf("only %d Deployments, %d StatefulSets, %d Jobs of %d downstream after 20 minutes", deps, sts, jobs, n)
			}
			time.Sleep(time.Second)
		}
		created = n
		fill := time.Since(start)
		// Until the running pods (the Deployment's and the StatefulSet's
		// of each workspace) are projected into kcp.
		wantPods := n
		if *syncApp {
			wantPods = 2 * n
		}
		projected, perr := 0, error(nil)
		for {
			projected, perr = projectedPods(ctx, s)
			if perr == nil && projected >= wantPods || time.Since(start) > 20*time.Minute {
				break
			}
			time.Sleep(3 * time.Second)
		}
		if perr != nil {
			log("  counting projected pods: %v", perr)
		}
		projectedIn := time.Since(start)
		time.Sleep(2 * time.Second)
		st := syncStep{workspaces: n, fill: fill, syncerGo: syncerGoroutines(debug), syncerRSS: rssMiB(sy.Process.Pid),
			kcpGo: s.goroutines(), kcpRSS: rssMiB(s.cmd.Process.Pid), projected: projected, projectedIn: projectedIn}
		st.syncerHeap = syncerHeap(debug, n)
		if r.objBytes == 0 {
			r.objBytes = workspaceObjectBytes(s, "root:app-0")
		}
		if *profileDir != "" {
			if raw, err := s.pprof("goroutine", "debug", "1"); err == nil {
				_ = os.WriteFile(filepath.Join(*profileDir, fmt.Sprintf("sync-kcp-goroutines-%d.txt", n)), raw, 0o644)
			}
		}
		log("%d placed workspaces: syncer %d goroutines, %.0f MiB RSS, %.1f MiB live heap; kcp %d goroutines, %.0f MiB RSS (filled in %s)",
			n, st.syncerGo, st.syncerRSS, st.syncerHeap, st.kcpGo, st.kcpRSS, st.fill.Round(time.Millisecond))
		r.steps = append(r.steps, st)
	}

	// Down: create a ConfigMap in kcp, until it exists on the physical cluster.
	ws := "root:app-0"
	if created == 0 {
		if err := s.createWorkspaces([][2]string{{"root", "app-0"}}); err != nil {
			return r, err
		}
		if err := placeAndDeploy(s, ws, nil, 1); err != nil {
			return r, err
		}
	}
	up, err := s.client(ws)
	if err != nil {
		return r, err
	}
	dns := syncer.DownstreamNamespace(logicalcluster.Name(ws), "default")
	var downLat []time.Duration
	for i := 0; i < *syncSamples; i++ {
		name := fmt.Sprintf("lat-%d", i)
		w, err := down.CoreV1().ConfigMaps(dns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			return r, err
		}
		t := time.Now()
		if _, err := up.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			w.Stop()
			return r, err
		}
		if err := waitFor(w, 30*time.Second, func(watch.Event) bool { return true }); err != nil {
			return r, fmt.Errorf("%s downstream: %v", name, err)
		}
		downLat = append(downLat, time.Since(t))
	}
	r.downP50, r.downP99 = percentile(downLat, 0.5), percentile(downLat, 0.99)

	// Up: a Service's load balancer address set downstream, until kcp shows it.
	if _, err := up.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		return r, err
	}
	var upLat []time.Duration
	for i := 0; i < *syncSamples; i++ {
		var svc *corev1.Service
		for svc == nil {
			got, err := down.CoreV1().Services(dns).Get(ctx, "lb", metav1.GetOptions{})
			if err == nil {
				svc = got
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		}
		ip := fmt.Sprintf("203.0.113.%d", i%250+1)
		if i%250 == 0 && i > 0 {
			ip = fmt.Sprintf("198.51.100.%d", i/250)
		}
		w, err := up.CoreV1().Services("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=lb"})
		if err != nil {
			return r, err
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		t := time.Now()
		if _, err := down.CoreV1().Services(dns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			w.Stop()
			return r, err
		}
		if err := waitFor(w, 30*time.Second, func(e watch.Event) bool {
			s, ok := e.Object.(*corev1.Service)
			return ok && len(s.Status.LoadBalancer.Ingress) == 1 && s.Status.LoadBalancer.Ingress[0].IP == ip
		}); err != nil {
			return r, fmt.Errorf("status up: %v", err)
		}
		upLat = append(upLat, time.Since(t))
	}
	r.upP50, r.upP99 = percentile(upLat, 0.5), percentile(upLat, 0.99)
	log("sync latency: down p50 %s p99 %s; status up p50 %s p99 %s", r.downP50, r.downP99, r.upP50, r.upP99)

	if *syncKindSamples > 0 {
		rc, err := pc.RESTConfig()
		if err != nil {
			return r, err
		}
		downDyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return r, err
		}
		if r.kinds, err = kindLatencies(ctx, s, ws, dns, downDyn, *syncKindSamples, log); err != nil {
			return r, err
		}
	}
	return r, nil
}

func readyCondition(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == workload.ConditionReady {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

// placeAndDeploy creates a Placement on root:compute and a one-replica
// Deployment in a workspace.
// placeAndDeploy creates, in workspace ws, a Placement on root:compute
// (with extra spec fields) and a Deployment web with replicas.
func placeAndDeploy(s *server, ws string, extra map[string]interface{}, replicas int32) error {
	ctx := context.Background()
	cfg, err := s.config(ws)
	if err != nil {
		return err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pl := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": workload.Group + "/" + workload.Version, "kind": "Placement",
		"metadata": map[string]interface{}{"name": "compute"},
		"spec":     map[string]interface{}{"locationWorkspace": "root:compute", "namespaceSelector": map[string]interface{}{}},
	}}
	for k, v := range extra {
		pl.Object["spec"].(map[string]interface{})[k] = v
	}
	if _, err := d.Resource(workload.PlacementsResource).Create(ctx, pl, metav1.CreateOptions{}); err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}}
	// The namespace's assignment follows the Placement within moments; a
	// Deployment created before it is labelled by the placement controller.
	for i := 0; ; i++ {
		_, err = c.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
		if err == nil || i > 50 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitFor(w watch.Interface, timeout time.Duration, ok func(watch.Event) bool) error {
	defer w.Stop()
	t := time.After(timeout)
	for {
		select {
		case e, open := <-w.ResultChan():
			if !open {
				return fmt.Errorf("watch closed")
			}
			if ok(e) {
				return nil
			}
		case <-t:
			return fmt.Errorf("timed out after %s", timeout)
		}
	}
}

func syncerGoroutines(addr string) int {
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var n int
	fmt.Fscanf(resp.Body, "goroutine profile: total %d", &n)
	return n
}

func printSync(r syncResult) {
	fmt.Printf("\n### Multi-cluster sync (one physical cluster, pull-mode syncer, SQLite)\n\n")
	fmt.Printf("| measure | value |\n|---|---|\n")
	fmt.Printf("| `kubectl kcp workload sync` to SyncTarget Ready | %s |\n", r.registerToReady.Round(time.Millisecond))
	fmt.Printf("| create in a workspace -> exists downstream, p50 / p99 (%d) | %s / %s |\n", *syncSamples, r.downP50.Round(100*time.Microsecond), r.downP99.Round(100*time.Microsecond))
	fmt.Printf("| downstream status change -> visible in kcp, p50 / p99 (%d) | %s / %s |\n", *syncSamples, r.upP50.Round(100*time.Microsecond), r.upP99.Round(100*time.Microsecond))
	each := "1 Deployment each"
	if *syncApp {
		each = "a Deployment, a StatefulSet and a Job each"
	}
	fmt.Printf("\n| placed workspaces (%s) | syncer goroutines | syncer RSS MiB | syncer live heap MiB | live heap KiB per workspace beyond its objects in kcp (JSON) | kcp goroutines | kcp RSS MiB | all downstream after | pods projected into kcp | after |\n|---|---|---|---|---|---|---|---|---|---|\n", each)
	fmt.Printf("| 0 | %d | %.0f | %.1f | | %d | %.0f | | | |\n", r.syncerBaseGo, r.syncerBaseRSS, r.syncerBaseHeap, r.kcpBaseGo, r.kcpBaseMB)
	for _, st := range r.steps {
		per := (st.syncerHeap-r.syncerBaseHeap)*1024/float64(st.workspaces) - float64(r.objBytes)/1024
		fmt.Printf("| %d | %d | %.0f | %.1f | %.1f | %d | %.0f | %s | %d | %s |\n", st.workspaces, st.syncerGo, st.syncerRSS, st.syncerHeap, per, st.kcpGo, st.kcpRSS,
			st.fill.Round(100*time.Millisecond), st.projected, st.projectedIn.Round(100*time.Millisecond))
	}
	fmt.Printf("\nIts objects in kcp: %d bytes of JSON per workspace (its namespace and assigned objects as kcp serves them, managedFields included; the downstream copies and projected objects the syncer holds too are not counted here: see its heap profile, -profile-dir).\n", r.objBytes)
	if len(r.kinds) > 0 {
		fmt.Printf("\n| kind | create in kcp -> exists on the physical cluster, p50 / p99 (%d each) |\n|---|---|\n", *syncKindSamples)
		for _, k := range r.kinds {
			fmt.Printf("| %s | %s / %s |\n", k.kind, k.p50.Round(100*time.Microsecond), k.p99.Round(100*time.Microsecond))
		}
	}
}

// syncerHeap is the syncer's live heap in MiB (HeapAlloc right after a
// GC, from its /debug/pprof); with -profile-dir the heap profile is kept
// as sync-syncer-heap-<n>.pb.gz.
func syncerHeap(addr string, n int) float64 {
	get := func(q string) ([]byte, error) {
		resp, err := http.Get("http://" + addr + "/debug/pprof/heap?" + q)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	if *profileDir != "" {
		if raw, err := get("gc=1"); err == nil {
			_ = os.WriteFile(filepath.Join(*profileDir, fmt.Sprintf("sync-syncer-heap-%d.pb.gz", n)), raw, 0o644)
		}
	}
	// Twice: the first GC frees what the last cycle left, the second reads.
	_, _ = get("gc=1&debug=1")
	raw, err := get("gc=1&debug=1")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, "# HeapAlloc = %g", &v); err == nil {
			return v / (1 << 20)
		}
	}
	return 0
}

// workspaceObjectBytes is the JSON size of what a placed workspace has
// in the syncer's view: its namespace and every object of a synced
// resource assigned to a target (a state label), as kcp serves them,
// managedFields included. These are "the objects" the syncer must hold per
// workspace, beyond which its memory is counted.
func workspaceObjectBytes(s *server, ws string) int {
	cfg, err := s.config(ws)
	if err != nil {
		return 0
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0
	}
	total := 0
	assigned := func(u *unstructured.Unstructured) bool {
		for k := range u.GetLabels() {
			if strings.HasPrefix(k, workload.StateLabelPrefix) {
				return true
			}
		}
		return false
	}
	if ns, err := d.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(context.Background(), "default", metav1.GetOptions{}); err == nil {
		if raw, err := json.Marshal(ns.Object); err == nil {
			total += len(raw)
		}
	}
	for _, gvr := range workload.SyncedResources {
		l, err := d.Resource(gvr).Namespace("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, it := range l.Items {
			if !assigned(&it) {
				continue
			}
			if raw, err := json.Marshal(it.Object); err == nil {
				total += len(raw)
			}
		}
	}
	return total
}
