package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
)

// The placement controller alone (issue 56): SyncTargets without physical
// clusters (the benchmark writes their heartbeats, as in -evictions), many
// namespaces with a Placement that selects three of four targets, the time
// until every namespace is assigned, then the time until every namespace
// has left a target that stopped beating (failover's decision part), and
// what kcp's CPU does over a quiet period afterwards.

var (
	placeRateOnly      = flag.Bool("placement-rate", false, "only measure the placement controller's decision rate (about 5 minutes per 10,000 namespaces and build): SyncTargets without physical clusters (heartbeats written by the benchmark), namespaces with a Placement each selecting three of four targets; time until all are assigned, time until all have left a target that stops beating, kcp's CPU over a quiet period")
	placeRateNS        = flag.String("placement-rate-namespaces", "1000,10000", "namespace counts for -placement-rate (a fresh server each)")
	placeRateShapes    = flag.String("placement-rate-shapes", "workspaces,namespaces", "shapes for -placement-rate: workspaces (one namespace, default, in each of N workspaces with a Placement each) and namespaces (N namespaces, -placement-rate-per-workspace in each of N/that workspaces)")
	placeRatePerWS     = flag.Int("placement-rate-per-workspace", 100, "namespaces per workspace in the namespaces shape of -placement-rate")
	placeRateBefore    = flag.String("placement-rate-before", "", "a kcp binary of an earlier build to measure first, side by side")
	placeRateBeforeMax = flag.Int("placement-rate-before-max", 1000, "largest namespace count measured with -placement-rate-before (the earlier build may take long at more)")
	placeRateQuiet     = flag.Duration("placement-rate-quiet", time.Minute, "quiet period of -placement-rate whose kcp CPU is measured (0 skips)")
	placeRateObjects   = flag.Int("placement-rate-objects", 1, "ConfigMaps in each namespace of -placement-rate (each is labelled when its namespace is assigned or moves)")
	placeRateLimit     = flag.Duration("placement-rate-timeout", 15*time.Minute, "give up waiting for assignments after this long (the rate so far is reported)")
)

type placeRateResult struct {
	bin, shape                     string
	namespaces, workspace, objects int
	// assigned: Placements created -> every namespace on three targets.
	assigned     time.Duration
	assignedDone int
	// moved: from the moment the dead target became NotReady until every
	// namespace that was on it is on three live targets; detect: kill ->
	// NotReady.
	detect, moved time.Duration
	onDead        int
	movedDone     int
	quietCPU      float64 // kcp CPU seconds over the quiet period
	cpuAssign     float64 // kcp CPU seconds while assigning
	cpuMove       float64 // kcp CPU seconds while moving
}

func benchPlaceRate(log func(string, ...any)) ([]placeRateResult, error) {
	var counts []int
	for _, f := range strings.Split(*placeRateNS, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-placement-rate-namespaces: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	bins := []string{""}
	if *placeRateBefore != "" {
		bins = []string{*placeRateBefore, ""}
	}
	var out []placeRateResult
	for _, n := range counts {
		for _, shape := range strings.Split(*placeRateShapes, ",") {
			for _, bin := range bins {
				if bin != "" && n > *placeRateBeforeMax {
					continue
				}
				log("== placement rate: %d namespaces, shape %s, %s", n, shape, binName(bin))
				r, err := placeRateOnce(bin, shape, n, log)
				out = append(out, r)
				if err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// nsTracker follows every namespace of all clusters with one watch and
// tells how many of the benchmark's have which assignment.
type nsTracker struct {
	mu       sync.Mutex
	assigned map[string]string // cluster/name -> assigned targets
	changed  chan struct{}
}

func trackNamespaces(ctx context.Context, all kubernetes.Interface, prefix string, log func(string, ...any)) (*nsTracker, error) {
	t := &nsTracker{assigned: map[string]string{}, changed: make(chan struct{}, 1)}
	note := func(ns *corev1.Namespace, deleted bool) {
		cl := ns.Annotations["kcp.io/cluster"]
		if !strings.HasPrefix(cl, prefix) || ns.Name == "kube-system" || ns.Name == "kube-public" {
			return
		}
		t.mu.Lock()
		if deleted {
			delete(t.assigned, cl+"/"+ns.Name)
		} else {
			t.assigned[cl+"/"+ns.Name] = ns.Annotations[workload.AssignedTargetAnnotation]
		}
		t.mu.Unlock()
		select {
		case t.changed <- struct{}{}:
		default:
		}
	}
	list := func() (string, error) {
		l, err := all.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			note(&l.Items[i], false)
		}
		return l.ResourceVersion, nil
	}
	rv, err := list()
	if err != nil {
		return nil, err
	}
	go func() {
		for ctx.Err() == nil {
			w, err := all.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(time.Second)
				if rv, err = list(); err != nil {
					log("listing namespaces: %v", err)
				}
				continue
			}
			for ev := range w.ResultChan() {
				ns, ok := ev.Object.(*corev1.Namespace)
				if !ok {
					continue
				}
				rv = ns.ResourceVersion
				if ev.Type != watch.Bookmark {
					note(ns, ev.Type == watch.Deleted)
				}
			}
			w.Stop()
		}
	}()
	return t, nil
}

// count says how many tracked namespaces satisfy ok.
func (t *nsTracker) count(ok func(assigned string) bool) (n, of int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.assigned {
		if ok(a) {
			n++
		}
	}
	return n, len(t.assigned)
}

// waitFor waits until want namespaces satisfy ok, or the timeout.
func (t *nsTracker) waitFor(want int, timeout time.Duration, ok func(string) bool) (int, error) {
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, _ := t.count(ok); n >= want {
			return n, nil
		}
		select {
		case <-deadline:
			n, _ := t.count(ok)
			return n, fmt.Errorf("only %d of %d namespaces after %s", n, want, timeout)
		case <-t.changed:
		case <-tick.C:
		}
	}
}

func placeRateOnce(bin, shape string, n int, log func(string, ...any)) (placeRateResult, error) {
	r := placeRateResult{bin: binName(bin), shape: shape, namespaces: n, objects: *placeRateObjects}
	perWS := 1
	if shape == "namespaces" {
		perWS = min(*placeRatePerWS, n)
	} else if shape != "workspaces" {
		return r, fmt.Errorf("-placement-rate-shapes: unknown shape %q", shape)
	}
	wsCount := (n + perWS - 1) / perWS
	r.workspace = wsCount
	s, stop, err := startInTemp("placerate", bin)
	if err != nil {
		return r, err
	}
	defer stop()
	s.stop()
	s.extra = []string{"--synctarget-heartbeat-timeout=10s", "--placement-eviction-delay=0s"}
	if _, err := s.start(); err != nil {
		return r, err
	}
	pid := s.cmd.Process.Pid
	pairs := [][2]string{{"root", "compute"}}
	for i := range wsCount {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("pr-%d", i)})
	}
	if err := s.createWorkspaces(pairs); err != nil {
		return r, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	compute, err := s.dynamic("root:compute")
	if err != nil {
		return r, err
	}
	targets := compute.Resource(workload.SyncTargetsResource)
	names := []string{"t-0", "t-1", "t-2", "t-3"}
	for _, name := range names {
		st := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "workload.kcp.io/v1alpha1", "kind": "SyncTarget",
			"metadata": map[string]interface{}{"name": name}}}
		if _, err := targets.Create(ctx, st, metav1.CreateOptions{}); err != nil {
			return r, err
		}
	}
	var mu sync.Mutex
	alive := map[string]bool{}
	for _, name := range names {
		alive[name] = true
	}
	beat := func(name string) error {
		u, err := targets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var st workload.SyncTarget
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &st); err != nil {
			return err
		}
		now := metav1.Now()
		st.Status.LastHeartbeatTime = &now
		meta.SetStatusCondition(&st.Status.Conditions, metav1.Condition{Type: workload.ConditionReady, Status: metav1.ConditionTrue, Reason: workload.ReasonHeartbeat, Message: "benchmark"})
		status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st.Status)
		if err != nil {
			return err
		}
		u.Object["status"] = status
		_, err = targets.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	}
	for _, name := range names {
		go func() {
			for ctx.Err() == nil {
				mu.Lock()
				ok := alive[name]
				mu.Unlock()
				if !ok {
					return
				}
				_ = beat(name)
				time.Sleep(time.Second)
			}
		}()
	}
	// Namespaces (default is one) and -placement-rate-objects ConfigMaps
	// in each, which assigning labels too.
	if err := parallel(wsCount, func(i int) error {
		c, err := s.client(fmt.Sprintf("root:pr-%d", i))
		if err != nil {
			return err
		}
		k := min(perWS, n-i*perWS)
		for j := range k {
			ns := "default"
			if j > 0 {
				ns = fmt.Sprintf("ns-%d", j)
				if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			for o := range *placeRateObjects {
				if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", o)}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		return r, err
	}
	all, err := s.client("*")
	if err != nil {
		return r, err
	}
	root, err := s.client("root")
	if err != nil {
		return r, err
	}
	tr, err := trackNamespaces(ctx, all, "root:pr-", log)
	if err != nil {
		return r, err
	}
	// Every target Ready before the Placements come.
	for {
		l, err := targets.List(ctx, metav1.ListOptions{})
		if err != nil {
			return r, err
		}
		readyN := 0
		for _, u := range l.Items {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]interface{}); ok && m["type"] == workload.ConditionReady && m["status"] == "True" {
					readyN++
				}
			}
		}
		if readyN == len(names) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	onThree := func(a string) bool { return a != "" && strings.Count(a, ",") == 2 }
	log("%d namespaces in %d workspaces, %d ConfigMap(s) each; creating the Placements", n, wsCount, *placeRateObjects)
	profiling := cpuProfile(root, fmt.Sprintf("placerate-%s-%s-%d-assign.pprof", profileTag(bin), shape, n), "assigning", log)
	cpu0, t0 := cpuSeconds(pid), time.Now()
	if err := parallel(wsCount, func(i int) error {
		d, err := s.dynamic(fmt.Sprintf("root:pr-%d", i))
		if err != nil {
			return err
		}
		pl := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": workload.Group + "/" + workload.Version, "kind": "Placement", "metadata": map[string]interface{}{"name": "three"},
			"spec": map[string]interface{}{"locationWorkspace": "root:compute", "namespaceSelector": map[string]interface{}{}, "numberOfClusters": int64(3)},
		}}
		_, err = d.Resource(workload.PlacementsResource).Create(ctx, pl, metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, err
	}
	r.assignedDone, err = tr.waitFor(n, *placeRateLimit, onThree)
	r.assigned, r.cpuAssign = time.Since(t0), cpuSeconds(pid)-cpu0
	profiling()
	log("assigned %d of %d in %s (%.0f/s), kcp CPU %.1f s", r.assignedDone, n, r.assigned.Round(10*time.Millisecond), float64(r.assignedDone)/r.assigned.Seconds(), r.cpuAssign)
	if err != nil {
		return r, err
	}
	// Settle: the looks after a change end, then the quiet period.
	time.Sleep(5 * time.Second)
	if *placeRateQuiet > 0 {
		c0 := cpuSeconds(pid)
		profiling := cpuProfile(root, fmt.Sprintf("placerate-%s-%s-%d-quiet.pprof", profileTag(bin), shape, n), "the quiet period", log)
		time.Sleep(*placeRateQuiet)
		r.quietCPU = cpuSeconds(pid) - c0
		profiling()
		log("quiet %s: kcp CPU %.2f s", *placeRateQuiet, r.quietCPU)
	}
	dead := "root:compute/t-0"
	r.onDead, _ = tr.count(func(a string) bool { return strings.Contains(a, dead) })
	mu.Lock()
	alive["t-0"] = false
	mu.Unlock()
	killed := time.Now()
	log("t-0 stops beating (%d namespaces on it)", r.onDead)
	w, err := targets.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=t-0"})
	if err != nil {
		return r, err
	}
	for ev := range w.ResultChan() {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		notReady := false
		for _, c := range conds {
			if m, ok := c.(map[string]interface{}); ok && m["type"] == workload.ConditionReady && m["status"] != "True" {
				notReady = true
			}
		}
		if notReady {
			break
		}
	}
	w.Stop()
	r.detect = time.Since(killed)
	profiling = cpuProfile(root, fmt.Sprintf("placerate-%s-%s-%d-failover.pprof", profileTag(bin), shape, n), "moving", log)
	cpu0, t1 := cpuSeconds(pid), time.Now()
	moved := func(a string) bool { return onThree(a) && !strings.Contains(a, dead) }
	r.movedDone, err = tr.waitFor(n, *placeRateLimit, moved)
	r.moved, r.cpuMove = time.Since(t1), cpuSeconds(pid)-cpu0
	profiling()
	log("NotReady %s after the kill; then every namespace off it in %s (%d of them had to move), kcp CPU %.1f s", r.detect.Round(10*time.Millisecond),
		r.moved.Round(10*time.Millisecond), r.onDead, r.cpuMove)
	if err != nil {
		return r, err
	}
	if *profileDir != "" {
		_ = os.WriteFile(filepath.Join(*profileDir, fmt.Sprintf("placerate-%s-%s-%d.log", profileTag(bin), shape, n)), []byte(fmt.Sprintf("%+v\n", r)), 0o644)
	}
	return r, nil
}

func profileTag(bin string) string {
	if bin != "" && bin == *placeRateBefore {
		return "before"
	}
	return "after"
}

func renderPlaceRate(rs []placeRateResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| build | shape | namespaces (workspaces), objects each | Placements created -> all on three targets | decisions/s | kcp CPU | target NotReady -> all off it (moved) | decisions/s | kcp CPU | quiet %s: kcp CPU |\n|---|---|---|---|---|---|---|---|---|---|\n", *placeRateQuiet)
	for _, r := range rs {
		done := ""
		if r.assignedDone < r.namespaces {
			done = fmt.Sprintf(" (%d done)", r.assignedDone)
		}
		moved := fmt.Sprintf("%s (%d)", r.moved.Round(10*time.Millisecond), r.onDead)
		if r.movedDone < r.namespaces {
			moved += fmt.Sprintf(" (%d done)", r.movedDone)
		}
		fmt.Fprintf(&b, "| %s | %s | %d (%d), %d | %s%s | %.0f | %.1f s | %s | %.0f | %.1f s | %.2f s |\n", r.bin, r.shape, r.namespaces, r.workspace, r.objects,
			r.assigned.Round(10*time.Millisecond), done, float64(r.assignedDone)/max(r.assigned.Seconds(), 0.001), r.cpuAssign,
			moved, float64(r.onDead)/max(r.moved.Seconds(), 0.001), r.cpuMove, r.quietCPU)
	}
	return b.String()
}
