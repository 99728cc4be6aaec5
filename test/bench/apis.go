package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/schema/apis"
)

var (
	apisOnly      = flag.Bool("apis", false, "run only the API-sharing benchmark (one export, -apis-consumers workspaces binding it, -apis-objects bound objects across them)")
	apisConsumers = flag.Int("apis-consumers", 1000, "consumer workspaces that bind the export")
	apisObjects   = flag.Int("apis-objects", 100000, "bound objects created across the consumers, listed through the provider's view")
	apisBefore    = flag.String("apis-before", "", "a kcp binary of an earlier build to run the API-sharing benchmark with first, side by side")
)

var benchDatabases = schema.GroupVersionResource{Group: "platform.example.com", Version: "v1", Resource: "databases"}

type apisResult struct {
	bin                        string // kcp binary; "" is -kcp
	consumers, objects         int
	bindP50, bindP99, bindMax  time.Duration
	bindAll                    time.Duration
	heapBefore, heapAfter      float64
	heapUsed                   float64 // after one request in each consumer, before binding
	gorBefore, gorAfter        int
	heapObjects                float64
	createsPerSec              float64
	viewInformer               []time.Duration
	viewList                   []time.Duration
	viewPaged                  time.Duration
	heapView                   float64
	consumerP50, consumerP99   time.Duration
	viewWatchOpen, viewWatchEv time.Duration
}

// benchAPIs: a provider publishes one export; consumers bind it (bind
// latency: APIBinding created until a list of the resource answers in the
// consumer); the server's live heap and goroutines before and after; then
// objects across the consumers and lists through the provider's view.
// With -profile-dir, heap profiles before and after binding.
func benchAPIs(bin string, log func(string, ...any)) (apisResult, error) {
	r := apisResult{bin: bin, consumers: *apisConsumers, objects: *apisObjects}
	label := "this"
	if bin != "" {
		label = "before"
	}
	s, stop, err := startInTemp("apis", bin)
	if err != nil {
		return r, err
	}
	defer stop()
	ctx := context.Background()
	pairs := [][2]string{{"root", "platform"}}
	for i := range r.consumers {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("consumer-%d", i)})
	}
	log("creating %d workspaces", len(pairs))
	if err := s.createWorkspaces(pairs); err != nil {
		return r, err
	}
	provider, err := s.dynamic("root:platform")
	if err != nil {
		return r, err
	}
	for _, obj := range []map[string]interface{}{
		{
			"apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIResourceSchema",
			"metadata": map[string]interface{}{"name": "v1.databases.platform.example.com"},
			"spec": map[string]interface{}{
				"group": "platform.example.com", "scope": "Namespaced",
				"names": map[string]interface{}{"plural": "databases", "singular": "database", "kind": "Database", "listKind": "DatabaseList"},
				"versions": []interface{}{map[string]interface{}{
					"name": "v1", "served": true, "storage": true,
					"subresources": map[string]interface{}{"status": map[string]interface{}{}},
					"schema": map[string]interface{}{"openAPIV3Schema": map[string]interface{}{
						"type": "object",
						"properties": map[string]interface{}{
							"spec":   map[string]interface{}{"type": "object", "properties": map[string]interface{}{"size": map[string]interface{}{"type": "integer"}}},
							"status": map[string]interface{}{"type": "object", "properties": map[string]interface{}{"phase": map[string]interface{}{"type": "string"}}},
						},
					}},
				}},
			},
		},
		{
			"apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExport",
			"metadata": map[string]interface{}{"name": "databases"},
			"spec":     map[string]interface{}{"latestResourceSchemas": []interface{}{"v1.databases.platform.example.com"}},
		},
	} {
		u := &unstructured.Unstructured{Object: obj}
		gvr := apis.SchemasResource
		if u.GetKind() == "APIExport" {
			gvr = apis.ExportsResource
		}
		if _, err := provider.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return r, fmt.Errorf("publishing the export: %v", err)
		}
	}
	time.Sleep(3 * time.Second)
	r.heapBefore, r.gorBefore = s.liveHeapMiB(), s.goroutines()
	log("%d workspaces: live heap %.0f MiB, %d goroutines", len(pairs), r.heapBefore, r.gorBefore)

	consumers := make([]dynamic.Interface, r.consumers)
	for i := range consumers {
		if consumers[i], err = s.dynamic(fmt.Sprintf("root:consumer-%d", i)); err != nil {
			return r, err
		}
	}
	// One request in each consumer first: what a workspace keeps once it
	// has been used at all (per-tenant request state) is not the binding's.
	if err := parallel(r.consumers, func(i int) error {
		_, err := consumers[i].Resource(apis.BindingsResource).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return r, err
	}
	time.Sleep(3 * time.Second)
	r.heapUsed = s.liveHeapMiB()
	s.writeProfile("apis-"+label+"-heap-unbound.pb.gz", log, "heap", "gc", "1")
	log("each consumer used once: live heap %.0f MiB", r.heapUsed)

	var mu sync.Mutex
	var lat []time.Duration
	t0 := time.Now()
	log("binding %d consumers (%d at a time)", r.consumers, *clients)
	if err := parallel(r.consumers, func(i int) error {
		b := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIBinding",
			"metadata": map[string]interface{}{"name": "databases"},
			"spec":     map[string]interface{}{"reference": map[string]interface{}{"export": map[string]interface{}{"path": "root:platform", "name": "databases"}}},
		}}
		start := time.Now()
		if _, err := consumers[i].Resource(apis.BindingsResource).Create(ctx, b, metav1.CreateOptions{}); err != nil {
			return err
		}
		for deadline := start.Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, err := consumers[i].Resource(benchDatabases).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
				return nil
			}
		}
		return fmt.Errorf("databases not served in root:consumer-%d 2 minutes after binding", i)
	}); err != nil {
		return r, err
	}
	r.bindAll = time.Since(t0)
	r.bindP50, r.bindP99, r.bindMax = percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1)
	time.Sleep(3 * time.Second)
	r.heapAfter, r.gorAfter = s.liveHeapMiB(), s.goroutines()
	s.writeProfile("apis-"+label+"-heap-bound.pb.gz", log, "heap", "gc", "1")
	log("bound: p50 %s p99 %s; live heap %.0f MiB, %d goroutines", r.bindP50, r.bindP99, r.heapAfter, r.gorAfter)

	per := r.objects / r.consumers
	t0 = time.Now()
	log("creating %d databases (%d per consumer)", per*r.consumers, per)
	if err := parallel(r.consumers, func(i int) error {
		for j := range per {
			obj := &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "platform.example.com/v1", "kind": "Database",
				"metadata": map[string]interface{}{"name": fmt.Sprintf("db-%d", j), "namespace": "default"},
				"spec":     map[string]interface{}{"size": int64(j)},
			}}
			if _, err := consumers[i].Resource(benchDatabases).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return r, err
	}
	r.objects = per * r.consumers
	r.createsPerSec = float64(r.objects) / time.Since(t0).Seconds()
	time.Sleep(3 * time.Second)
	r.heapObjects = s.liveHeapMiB()
	log("%d databases: %.0f/s; live heap %.0f MiB", r.objects, r.createsPerSec, r.heapObjects)

	// The provider's view, as a controller starts: an informer (its list
	// and watch) until it has synced, twice (the first is the view's first
	// request: the server builds what serves it); then full lists across
	// all consumers, and the same in pages of 500.
	cfg, err := s.config("root")
	if err != nil {
		return r, err
	}
	cfg.Host = fmt.Sprintf("https://127.0.0.1:%d/services/apiexport/root:platform/databases", s.port)
	view, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(cfg))
	if err != nil {
		return r, err
	}
	root, err := s.client("root")
	if err != nil {
		return r, err
	}
	profiled := cpuProfile(root, "apis-view.pprof", "the view's informers and lists", log)
	for range 2 {
		inf, err := clusterinformer.Dynamic(cfg, benchDatabases)
		if err != nil {
			return r, err
		}
		infCtx, stopInf := context.WithCancel(ctx)
		t := time.Now()
		inf.Start(infCtx)
		err = inf.WaitForCacheSync(infCtx)
		d := time.Since(t)
		n := len(inf.Indexer().ListKeys())
		stopInf()
		if err != nil {
			return r, fmt.Errorf("an informer on the view: %v", err)
		}
		if n != r.objects {
			return r, fmt.Errorf("an informer on the view holds %d databases, want %d", n, r.objects)
		}
		r.viewInformer = append(r.viewInformer, d)
	}
	for range 3 {
		t := time.Now()
		list, err := view.Resource(benchDatabases).List(ctx, metav1.ListOptions{})
		if err != nil {
			return r, fmt.Errorf("listing through the view: %v", err)
		}
		if len(list.Items) != r.objects {
			return r, fmt.Errorf("the view listed %d databases, want %d", len(list.Items), r.objects)
		}
		r.viewList = append(r.viewList, time.Since(t))
	}
	t := time.Now()
	n, cont := 0, ""
	for {
		list, err := view.Resource(benchDatabases).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return r, fmt.Errorf("paging through the view: %v", err)
		}
		n += len(list.Items)
		if cont = list.GetContinue(); cont == "" {
			break
		}
	}
	if n != r.objects {
		return r, fmt.Errorf("paging through the view gave %d databases, want %d", n, r.objects)
	}
	r.viewPaged = time.Since(t)
	profiled()
	r.heapView = s.liveHeapMiB()
	s.writeProfile("apis-view-heap.pprof", log, "heap", "gc", "1")
	log("view: informer synced %v, full list %v, paged %v; live heap %.0f MiB", r.viewInformer, r.viewList, r.viewPaged, r.heapView)

	// A watch through the view: open it from the list's resource version,
	// then one write in a consumer until the watch delivers it.
	list, err := view.Resource(benchDatabases).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return r, err
	}
	t = time.Now()
	w, err := view.Resource(benchDatabases).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		return r, err
	}
	defer w.Stop()
	r.viewWatchOpen = time.Since(t)
	t = time.Now()
	if _, err := consumers[0].Resource(benchDatabases).Namespace("default").Patch(ctx, "db-0", "application/merge-patch+json", []byte(`{"spec":{"size":999}}`), metav1.PatchOptions{}); err != nil {
		return r, err
	}
	select {
	case <-w.ResultChan():
		r.viewWatchEv = time.Since(t)
	case <-time.After(time.Minute):
		return r, fmt.Errorf("the view's watch delivered nothing in a minute")
	}

	// A consumer's own list of its databases.
	var own []time.Duration
	for i := range 200 {
		t := time.Now()
		if _, err := consumers[i%r.consumers].Resource(benchDatabases).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
			return r, err
		}
		own = append(own, time.Since(t))
	}
	r.consumerP50, r.consumerP99 = percentile(own, 0.5), percentile(own, 0.99)
	return r, nil
}

func (s *server) dynamic(cluster string) (dynamic.Interface, error) {
	cfg, err := s.config(cluster)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(cfg)
}

func renderAPIs(rs []apisResult) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	var b bytes.Buffer
	b.WriteString("| measure |")
	for _, r := range rs {
		if r.bin == "" {
			b.WriteString(" this build |")
		} else {
			fmt.Fprintf(&b, " before (%s) |", filepath.Base(r.bin))
		}
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(rs)) + "\n")
	row := func(name string, cell func(r apisResult) string) {
		b.WriteString("| " + name + " |")
		for _, r := range rs {
			b.WriteString(" " + cell(r) + " |")
		}
		b.WriteString("\n")
	}
	r0 := rs[0]
	perBinding := func(from, to float64) float64 { return (to - from) * 1024 / float64(r0.consumers) }
	row(fmt.Sprintf("bind latency (APIBinding created -> list answers in the consumer), p50 / p99 / max, %d consumers, %d at a time", r0.consumers, *clients), func(r apisResult) string {
		return ms(r.bindP50) + " / " + ms(r.bindP99) + " / " + ms(r.bindMax)
	})
	row(fmt.Sprintf("all %d consumers bound and served", r0.consumers), func(r apisResult) string { return fmt.Sprintf("%.1f s", r.bindAll.Seconds()) })
	row("live heap: workspaces -> each used once -> + bindings (each served once)", func(r apisResult) string {
		return fmt.Sprintf("%.0f -> %.0f -> %.0f MiB", r.heapBefore, r.heapUsed, r.heapAfter)
	})
	row("live heap per binding (from the used workspaces)", func(r apisResult) string { return fmt.Sprintf("%.1f KiB", perBinding(r.heapUsed, r.heapAfter)) })
	row("live heap per binding with the workspace's first request (as measured before issue 56)", func(r apisResult) string {
		return fmt.Sprintf("%.1f KiB", perBinding(r.heapBefore, r.heapAfter))
	})
	row("goroutines: before -> after binding", func(r apisResult) string { return fmt.Sprintf("%d -> %d", r.gorBefore, r.gorAfter) })
	row(fmt.Sprintf("bound objects created (%d consumers, %d each)", r0.consumers, r0.objects/r0.consumers), func(r apisResult) string {
		return fmt.Sprintf("%.0f/s; live heap after %.0f MiB", r.createsPerSec, r.heapObjects)
	})
	perSec := func(r apisResult, d time.Duration) string {
		return fmt.Sprintf("%.0f/s", float64(r.objects)/d.Seconds())
	}
	row("provider's view: an informer (list and watch) until synced, the view's first request; then again", func(r apisResult) string {
		return fmt.Sprintf("%s (%s); %s (%s)", ms(r.viewInformer[0]), perSec(r, r.viewInformer[0]), ms(r.viewInformer[1]), perSec(r, r.viewInformer[1]))
	})
	row(fmt.Sprintf("provider's view: one list of all %d objects (3 runs)", r0.objects), func(r apisResult) string {
		return fmt.Sprintf("%s / %s / %s (%s at the median)", ms(r.viewList[0]), ms(r.viewList[1]), ms(r.viewList[2]), perSec(r, percentile(r.viewList, 0.5)))
	})
	row("provider's view: the same in pages of 500", func(r apisResult) string { return fmt.Sprintf("%s (%s)", ms(r.viewPaged), perSec(r, r.viewPaged)) })
	row("live heap after the view's informers and lists (with the objects)", func(r apisResult) string {
		return fmt.Sprintf("%.0f -> %.0f MiB (%.0f bytes per object)", r.heapObjects, r.heapView, (r.heapView-r.heapObjects)*(1<<20)/float64(r.objects))
	})
	row("provider's view: watch opened from a list's resourceVersion; a consumer's write -> event", func(r apisResult) string {
		return ms(r.viewWatchOpen) + "; " + ms(r.viewWatchEv)
	})
	row(fmt.Sprintf("a consumer lists its own %d databases, p50 / p99 (200)", r0.objects/r0.consumers), func(r apisResult) string {
		return ms(r.consumerP50) + " / " + ms(r.consumerP99)
	})
	return b.String()
}
