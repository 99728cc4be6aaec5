package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

var (
	workspaceTree = flag.Bool("workspace-tree", true, "after the flat workspaces, also create as many as a tree (10 organizations with teams)")
	workspaceFlat = flag.Bool("workspace-flat", true, "create the flat workspaces; false with -workspace-tree creates only the tree, on a server without the flat ones (to compare the shapes at the same size)")
)

var workspacesGVR = schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspaces"}

// wsResult is one workspace-creation run.
type wsResult struct {
	datastore string
	shape     string
	count     int
	perSec    float64
	// cpuPerWs is the server's CPU time (user and system) from the first
	// create until the last workspace is Ready, divided by their number.
	cpuPerWs            time.Duration
	rssBefore, rssAfter float64
	// live heap after a forced collection, MiB
	heapBefore, heapAfter float64
	gorBefore, gorAfter   int
}

// createWorkspaces creates the given (parent, name) pairs with `clients`
// concurrent clients and waits until every workspace reports Ready.
func (s *server) createWorkspaces(pairs [][2]string) error {
	ctx := context.Background()
	dyns := map[string]dynamic.ResourceInterface{}
	for _, p := range pairs {
		if _, ok := dyns[p[0]]; ok {
			continue
		}
		cfg, err := s.config(p[0])
		if err != nil {
			return err
		}
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		dyns[p[0]] = d.Resource(workspacesGVR)
	}
	// Note where each parent's workspaces stand before the creates, to
	// watch from there: listing every workspace afterwards would be most
	// of the time measured when a parent already holds 100,000.
	since := map[string]string{}
	for parent, d := range dyns {
		l, err := d.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		since[parent] = l.GetResourceVersion()
	}
	// Wait until every workspace is Ready with one watch per parent from
	// before the creates, opened before them, as a user's `kubectl wait`
	// would be (a list of every workspace each half second would itself
	// load the server more the more workspaces there are; a watch opened
	// only after the creates would replay all their events at the end);
	// if it ends, one list and a watch from there.
	waitCtx, stopWaiting := context.WithTimeout(ctx, 30*time.Minute)
	defer stopWaiting()
	wanted := map[string]map[string]bool{}
	for _, p := range pairs {
		if wanted[p[0]] == nil {
			wanted[p[0]] = map[string]bool{}
		}
		wanted[p[0]][p[1]] = true
	}
	waited := make(chan error, len(dyns))
	for parent, d := range dyns {
		w, err := d.Watch(waitCtx, metav1.ListOptions{ResourceVersion: since[parent]})
		if err != nil {
			return err
		}
		go func() { waited <- waitReady(waitCtx, d, parent, wanted[parent], w) }()
	}
	if err := parallel(len(pairs), func(i int) error {
		p := pairs[i]
		ws := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace",
			"metadata": map[string]interface{}{"name": p[1]},
		}}
		_, err := dyns[p[0]].Create(ctx, ws, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	for range dyns {
		if err := <-waited; err != nil {
			return err
		}
	}
	return nil
}

// waitReady reads w until every wanted workspace of parent is Ready; if
// the watch ends first, it lists and watches again from the list.
func waitReady(ctx context.Context, d dynamic.ResourceInterface, parent string, wanted map[string]bool, w watch.Interface) error {
	ready := map[string]bool{}
	note := func(u *unstructured.Unstructured) {
		if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase == "Ready" && wanted[u.GetName()] {
			ready[u.GetName()] = true
		}
	}
	for {
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				note(u)
			}
			if len(ready) >= len(wanted) {
				break
			}
		}
		w.Stop()
		if len(ready) >= len(wanted) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d workspaces in %s are ready", len(ready), len(wanted), parent)
		}
		list, err := d.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range list.Items {
			note(&list.Items[i])
		}
		if len(ready) >= len(wanted) {
			return nil
		}
		if w, err = d.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}); err != nil {
			return err
		}
	}
}

// benchWorkspaces measures creation rate and marginal cost of empty workspaces.
func benchWorkspaces(s *server, kind string, n int, log func(string, ...any)) ([]wsResult, error) {
	var out []wsResult
	// Count "before" on a settled server: right after a start it is still
	// starting caches and their goroutines.
	waitSettled(s.cmd.Process.Pid, 2*time.Minute)
	root, err := s.client("root")
	if err != nil {
		return nil, err
	}
	if !*workspaceFlat {
		return benchTree(s, kind, n, root, log)
	}
	s.writeProfile(fmt.Sprintf("workspaces-%s-before.pprof", kind), log, "heap", "gc", "1")
	r := wsResult{datastore: kind, shape: "flat", count: n, heapBefore: s.liveHeapMiB(), rssBefore: rssMiB(s.cmd.Process.Pid), gorBefore: s.goroutines()}
	var pairs [][2]string
	for i := 0; i < n; i++ {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("flat-%d", i)})
	}
	profiling := cpuProfile(root, fmt.Sprintf("workspaces-%s-cpu.pprof", kind), "flat workspace creation", log)
	t0, cpu0 := time.Now(), cpuSeconds(s.cmd.Process.Pid)
	if err := s.createWorkspaces(pairs); err != nil {
		return nil, err
	}
	r.perSec = float64(n) / time.Since(t0).Seconds()
	r.cpuPerWs = perWorkspace(cpuSeconds(s.cmd.Process.Pid)-cpu0, n)
	profiling()
	time.Sleep(3 * time.Second)
	r.heapAfter, r.rssAfter, r.gorAfter = s.liveHeapMiB(), rssMiB(s.cmd.Process.Pid), s.goroutines()
	s.writeProfile(fmt.Sprintf("workspaces-%s-after.pprof", kind), log, "heap", "gc", "1")
	log("%d flat workspaces: %.0f/s, server CPU %s per workspace, RSS %.0f -> %.0f MiB, live heap %.1f -> %.1f MiB, goroutines %d -> %d",
		n, r.perSec, r.cpuPerWs.Round(10*time.Microsecond), r.rssBefore, r.rssAfter, r.heapBefore, r.heapAfter, r.gorBefore, r.gorAfter)
	out = append(out, r)
	if !*workspaceTree {
		return out, nil
	}
	tree, err := benchTree(s, kind, n, root, log)
	return append(out, tree...), err
}

// benchTree creates n workspaces as a tree: organizations, then teams in them.
func benchTree(s *server, kind string, n int, root kubernetes.Interface, log func(string, ...any)) ([]wsResult, error) {
	// A tree: orgs, then teams inside them.
	orgs := 10
	if n < 100 {
		orgs = 2
	}
	var orgPairs, teamPairs [][2]string
	for o := 0; o < orgs; o++ {
		orgPairs = append(orgPairs, [2]string{"root", fmt.Sprintf("org-%d", o)})
		for t := 0; t < n/orgs-1; t++ {
			teamPairs = append(teamPairs, [2]string{fmt.Sprintf("root:org-%d", o), fmt.Sprintf("team-%d", t)})
		}
	}
	t0 := time.Now()
	if err := s.createWorkspaces(orgPairs); err != nil {
		return nil, err
	}
	orgsTook := time.Since(t0)
	t1, cpu1 := time.Now(), cpuSeconds(s.cmd.Process.Pid)
	profiling := cpuProfile(root, fmt.Sprintf("workspaces-%s-tree-cpu.pprof", kind), "team workspace creation (tree)", log)
	if err := s.createWorkspaces(teamPairs); err != nil {
		return nil, err
	}
	profiling()
	total := len(orgPairs) + len(teamPairs)
	tr := wsResult{datastore: kind, shape: fmt.Sprintf("tree (%d orgs)", orgs), count: total, perSec: float64(total) / time.Since(t0).Seconds(),
		cpuPerWs: perWorkspace(cpuSeconds(s.cmd.Process.Pid)-cpu1, len(teamPairs))}
	log("%d tree workspaces: %.0f/s (the %d organizations first, %.1fs; then %d teams in them at %.0f/s, server CPU %s per team)", total, tr.perSec,
		len(orgPairs), orgsTook.Seconds(), len(teamPairs), float64(len(teamPairs))/time.Since(t1).Seconds(), tr.cpuPerWs.Round(10*time.Microsecond))
	return []wsResult{tr}, nil
}

// perWorkspace divides seconds of CPU among n workspaces.
func perWorkspace(seconds float64, n int) time.Duration {
	return time.Duration(seconds * float64(time.Second) / float64(n))
}
