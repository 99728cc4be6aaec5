package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var (
	moveOnly    = flag.Bool("move", false, "only measure moving a workspace between shards (WorkspaceMove): two shards on PostgreSQL databases of their own behind a front proxy, a workspace of each -move-objects size moved from shard-1 to root while a client writes to it; time, read-only window, writes refused")
	moveObjects = flag.String("move-objects", "1000,10000", "workspace sizes (ConfigMaps) to move (-move)")
)

type moveResult struct {
	objects                  int
	total, readOnly          time.Duration
	refused, acked, failures int
	maxRefusedRun            time.Duration
}

var workspaceMovesResource = schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspacemoves"}

func benchMove(log func(string, ...any)) error {
	var sizes []int
	for _, s := range strings.Split(*moveObjects, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil {
			return fmt.Errorf("-move-objects %q: %v", *moveObjects, err)
		}
		sizes = append(sizes, n)
	}
	set, err := startShards(2, log)
	defer set.stop()
	if err != nil {
		return err
	}
	ctx := context.Background()
	rootCfg, err := set.proxyConfig("root")
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rootCfg)
	if err != nil {
		return err
	}
	var results []moveResult
	for i, n := range sizes {
		name := fmt.Sprintf("moved-%d", i)
		if err := createReady(ctx, dyn.Resource(schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspaces"}), name, "shard-1"); err != nil {
			return err
		}
		c := "root:" + name
		cs, err := set.proxyClient(c)
		if err != nil {
			return err
		}
		log("filling %s with %d ConfigMaps", c, n)
		work := make(chan int)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range work {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", j)}, Data: map[string]string{"payload": strings.Repeat("x", 200)}}
					for {
						if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err == nil || apierrors.IsAlreadyExists(err) {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}()
		}
		for j := range n {
			work <- j
		}
		close(work)
		wg.Wait()

		// One writer through the proxy during the move: which writes are
		// refused, and for how long in a row.
		wctx, stop := context.WithCancel(ctx)
		r := moveResult{objects: n}
		var firstRefused time.Time
		done := make(chan struct{})
		go func() {
			defer close(done)
			for k := 0; wctx.Err() == nil; k++ {
				_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%06d", k)}}, metav1.CreateOptions{})
				switch {
				case err == nil:
					r.acked++
					if !firstRefused.IsZero() {
						r.maxRefusedRun = max(r.maxRefusedRun, time.Since(firstRefused))
						firstRefused = time.Time{}
					}
				case apierrors.IsForbidden(err):
					r.refused++
					if firstRefused.IsZero() {
						firstRefused = time.Now()
					}
				default:
					r.failures++
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		time.Sleep(time.Second)
		t0 := time.Now()
		mv := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "WorkspaceMove",
			"metadata": map[string]interface{}{"name": "move-" + name},
			"spec":     map[string]interface{}{"workspace": name, "toShard": "root"},
		}}
		if _, err := dyn.Resource(workspaceMovesResource).Create(ctx, mv, metav1.CreateOptions{}); err != nil {
			stop()
			return err
		}
		for {
			got, err := dyn.Resource(workspaceMovesResource).Get(ctx, "move-"+name, metav1.GetOptions{})
			if err == nil {
				phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
				if phase == "Failed" {
					stop()
					msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
					return fmt.Errorf("move of %s failed: %s", c, msg)
				}
				if phase == "Succeeded" {
					r.total = time.Since(t0)
					ro, _, _ := unstructured.NestedFloat64(got.Object, "status", "readOnlySeconds")
					r.readOnly = time.Duration(ro * float64(time.Second))
					if fc, ok, _ := unstructured.NestedString(got.Object, "status", "frozenCopy"); ok {
						log("%s: the copy while read-only: %s", c, fc)
					}
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		stop()
		<-done
		log("moved %s (%d objects) in %v, read-only %v", c, n, r.total, r.readOnly)
		results = append(results, r)
	}
	fmt.Printf("\nMoving a workspace from shard-1 to root (each shard on a PostgreSQL database of its own; %s, %d cores), one client writing a ConfigMap every 10 ms through the front proxy:\n\n", cpuModel(), runtime.NumCPU())
	fmt.Println("| objects | move took | read-only (status.readOnlySeconds) | longest run of refused writes | writes refused (403) | other write errors |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %d | %.1f s | %.1f s | %.1f s | %d | %d |\n", r.objects, r.total.Seconds(), r.readOnly.Seconds(), r.maxRefusedRun.Seconds(), r.refused, r.failures)
	}
	return nil
}
