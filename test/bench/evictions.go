package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
)

var (
	evictionsOnly    = flag.Bool("evictions", false, "only measure the eviction rate limit: SyncTargets without workloads (heartbeats written by the benchmark) fail at once, and the times their namespaces move to the spare targets are recorded, with --placement-eviction-rate at -eviction-rate and at 0 (no bound)")
	evictionTargets  = flag.Int("eviction-targets", 10, "SyncTargets that fail at once in -evictions")
	evictionNSPer    = flag.Int("eviction-namespaces", 5, "namespaces per failing SyncTarget in -evictions")
	evictionRateFlag = flag.Float64("eviction-rate", 0.5, "--placement-eviction-rate of the limited run of -evictions (targets per second)")
)

type evictionRun struct {
	rate float64
	// moved: per failing target, when each of its namespaces left it
	// (from the moment the heartbeats stopped).
	moved map[string][]time.Duration
}

func benchEvictions(log func(string, ...any)) ([]evictionRun, error) {
	var runs []evictionRun
	for _, rate := range []float64{*evictionRateFlag, 0} {
		r, err := evictionsOnce(rate, log)
		if err != nil {
			return runs, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func evictionsOnce(rate float64, log func(string, ...any)) (evictionRun, error) {
	run := evictionRun{rate: rate, moved: map[string][]time.Duration{}}
	s, stop, err := startInTemp("evictions", "")
	if err != nil {
		return run, err
	}
	defer stop()
	// (A fresh server per run, restarted with the flags.)
	s.stop()
	s.extra = []string{"--synctarget-heartbeat-timeout=10s", "--placement-eviction-delay=0s", fmt.Sprintf("--placement-eviction-rate=%g", rate)}
	if _, err := s.start(); err != nil {
		return run, err
	}
	n := *evictionTargets
	pairs := [][2]string{{"root", "compute"}}
	for i := range n {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("ev-%d", i)})
	}
	if err := s.createWorkspaces(pairs); err != nil {
		return run, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	compute, err := s.dynamic("root:compute")
	if err != nil {
		return run, err
	}
	targets := compute.Resource(workload.SyncTargetsResource)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("st-%d", i))
	}
	spares := []string{"spare-0", "spare-1"}
	for _, name := range append(append([]string{}, names...), spares...) {
		slot := strings.TrimPrefix(name, "st-")
		if strings.HasPrefix(name, "spare") {
			slot = "spare"
		}
		st := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "workload.kcp.io/v1alpha1", "kind": "SyncTarget",
			"metadata": map[string]interface{}{"name": name, "labels": map[string]interface{}{"slot": slot}},
			"spec":     map[string]interface{}{"unschedulable": strings.HasPrefix(name, "spare")}}}
		if _, err := targets.Create(ctx, st, metav1.CreateOptions{}); err != nil {
			return run, err
		}
	}
	// The benchmark is every target's syncer: a heartbeat a second, until
	// the failing ones stop.
	var mu sync.Mutex
	alive := map[string]bool{}
	for _, name := range append(append([]string{}, names...), spares...) {
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
	go func() {
		for ctx.Err() == nil {
			mu.Lock()
			var now []string
			for name, ok := range alive {
				if ok {
					now = append(now, name)
				}
			}
			mu.Unlock()
			for _, name := range now {
				_ = beat(name)
			}
			time.Sleep(time.Second)
		}
	}()
	// Each workspace runs on its own target, or a spare.
	for i := range n {
		ws := fmt.Sprintf("root:ev-%d", i)
		d, err := s.dynamic(ws)
		if err != nil {
			return run, err
		}
		p := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "workload.kcp.io/v1alpha1", "kind": "Placement",
			"metadata": map[string]interface{}{"name": "p"},
			"spec": map[string]interface{}{"locationWorkspace": "root:compute", "namespaceSelector": map[string]interface{}{},
				"locationSelector": map[string]interface{}{"matchExpressions": []interface{}{map[string]interface{}{"key": "slot", "operator": "In", "values": []interface{}{fmt.Sprint(i), "spare"}}}}}}}
		if _, err := d.Resource(workload.PlacementsResource).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return run, err
		}
		c, err := s.client(ws)
		if err != nil {
			return run, err
		}
		for j := 1; j < *evictionNSPer; j++ {
			if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%d", j)}}, metav1.CreateOptions{}); err != nil {
				return run, err
			}
		}
	}
	all, err := s.client("*")
	if err != nil {
		return run, err
	}
	// where: namespace (workspace/name) -> assigned targets.
	where := func() (map[string]string, error) {
		l, err := all.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, ns := range l.Items {
			cl := ns.Annotations["kcp.io/cluster"]
			if !strings.HasPrefix(cl, "root:ev-") || ns.Name == "kube-system" || ns.Name == "kube-public" {
				continue
			}
			out[cl+"/"+ns.Name] = ns.Annotations[workload.AssignedTargetAnnotation]
		}
		return out, nil
	}
	want := n * *evictionNSPer
	deadline := time.Now().Add(3 * time.Minute)
	for {
		w, err := where()
		if err != nil {
			return run, err
		}
		placed := 0
		for _, a := range w {
			if strings.HasPrefix(a, "root:compute/st-") {
				placed++
			}
		}
		if placed == want {
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("only %d of %d namespaces placed on their targets", placed, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, sp := range spares {
		if _, err := targets.Patch(ctx, sp, "application/merge-patch+json", []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
			return run, err
		}
	}
	time.Sleep(3 * time.Second)
	if w, err := where(); err != nil {
		return run, err
	} else {
		for k, a := range w {
			if !strings.HasPrefix(a, "root:compute/st-") {
				return run, fmt.Errorf("namespace %s moved to %q before the targets failed (heartbeats too slow for the timeout?)", k, a)
			}
		}
	}
	log("rate %g: %d namespaces on %d targets; the targets stop beating", rate, want, n)
	mu.Lock()
	for _, name := range names {
		alive[name] = false
	}
	mu.Unlock()
	died := time.Now()
	left := map[string]bool{}
	deadline = died.Add(time.Duration(float64(n)/max(rate, 0.01)*float64(time.Second)) + 2*time.Minute)
	for len(left) < want {
		if time.Now().After(deadline) {
			return run, fmt.Errorf("only %d of %d namespaces moved", len(left), want)
		}
		w, err := where()
		if err != nil {
			return run, err
		}
		at := time.Since(died)
		for k, a := range w {
			if left[k] || strings.Contains(a, "root:compute/st-") {
				continue
			}
			left[k] = true
			slot := strings.TrimPrefix(strings.SplitN(k, "/", 2)[0], "root:ev-")
			run.moved["st-"+slot] = append(run.moved["st-"+slot], at)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return run, nil
}

func renderEvictions(runs []evictionRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| --placement-eviction-rate | targets | namespaces | first target left | last target left | least gap between targets | most spread within one target |\n|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		var starts []time.Duration
		var spread time.Duration
		total := 0
		for _, ts := range r.moved {
			sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
			starts = append(starts, ts[0])
			spread = max(spread, ts[len(ts)-1]-ts[0])
			total += len(ts)
		}
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
		gap := time.Duration(0)
		for i := 1; i < len(starts); i++ {
			if d := starts[i] - starts[i-1]; i == 1 || d < gap {
				gap = d
			}
		}
		rate := fmt.Sprintf("%g (one target per %s)", r.rate, time.Duration(float64(time.Second)/r.rate))
		if r.rate == 0 {
			rate = "0 (no bound)"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s |\n", rate, len(r.moved), total, starts[0].Round(100*time.Millisecond),
			starts[len(starts)-1].Round(100*time.Millisecond), gap.Round(100*time.Millisecond), spread.Round(100*time.Millisecond))
	}
	return b.String()
}
