package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"sort"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var crdClusters = flag.Int("crd-clusters", 1000, "logical clusters that each get one CRD and 10 custom resources (SQLite); 0 skips")

type crdResult struct {
	clusters                  int
	rssWorkspaces, rssCRDs    float64
	rssObjects                float64
	gorWorkspaces, gorObjects int
	firstP50, firstP99        time.Duration
	steadyP50, steadyP99      time.Duration
	builtinP50, builtinP99    time.Duration
	crdsPerSec                float64
}

var gadgets = schema.GroupVersionResource{Group: "bench.example.com", Version: "v1", Resource: "gadgets"}

func gadgetCRD(i int) *apiextensionsv1.CustomResourceDefinition {
	// Each cluster its own schema (a different maximum).
	max := float64(i%50 + 10)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.bench.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gadgets.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size": {Type: "integer", Maximum: &max},
						}},
					}}}}},
		},
	}
}

// parallel runs f(i) for i in [0,n) with `clients` workers.
func parallel(n int, f func(i int) error) error {
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(float64(len(d)-1)*p)]
}

// benchCRDs: n workspaces, then one CRD each (own schema), then the first
// request per cold cluster, then 10 objects each, then steady-state gets.
func benchCRDs(n int, log func(string, ...any)) (crdResult, error) {
	r := crdResult{clusters: n}
	s, stop, err := startInTemp("crds", "")
	if err != nil {
		return r, err
	}
	defer stop()
	var pairs [][2]string
	for i := 0; i < n; i++ {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("crd-%d", i)})
	}
	if err := s.createWorkspaces(pairs); err != nil {
		return r, err
	}
	time.Sleep(3 * time.Second)
	r.rssWorkspaces, r.gorWorkspaces = rssMiB(s.cmd.Process.Pid), s.goroutines()
	log("%d workspaces: RSS %.0f MiB, %d goroutines", n, r.rssWorkspaces, r.gorWorkspaces)

	ctx := context.Background()
	crdClients := make([]apiextensionsclient.Interface, n)
	dyns := make([]dynamic.NamespaceableResourceInterface, n)
	for i := range n {
		cfg, err := s.config(fmt.Sprintf("root:crd-%d", i))
		if err != nil {
			return r, err
		}
		if crdClients[i], err = apiextensionsclient.NewForConfig(cfg); err != nil {
			return r, err
		}
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return r, err
		}
		dyns[i] = d.Resource(gadgets)
	}
	t0 := time.Now()
	if err := parallel(n, func(i int) error {
		_, err := crdClients[i].ApiextensionsV1().CustomResourceDefinitions().Create(ctx, gadgetCRD(i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, err
	}
	if err := parallel(n, func(i int) error {
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			crd, err := crdClients[i].ApiextensionsV1().CustomResourceDefinitions().Get(ctx, gadgets.Resource+"."+gadgets.Group, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		return fmt.Errorf("CRD in root:crd-%d not established", i)
	}); err != nil {
		return r, err
	}
	r.crdsPerSec = float64(n) / time.Since(t0).Seconds()
	r.rssCRDs = rssMiB(s.cmd.Process.Pid)
	log("%d CRDs established: %.0f/s, RSS %.0f MiB", n, r.crdsPerSec, r.rssCRDs)

	// First request in a cold cluster (its serving state is built), one
	// cluster at a time so that the latency is the request's own.
	time.Sleep(3 * time.Second) // past upstream's two-second wait after Established
	first := make([]time.Duration, 0, n)
	for i := range n {
		t := time.Now()
		if _, err := dyns[i].Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
			return r, fmt.Errorf("first list in root:crd-%d: %v", i, err)
		}
		first = append(first, time.Since(t))
	}
	r.firstP50, r.firstP99 = percentile(first, 0.5), percentile(first, 0.99)
	if err := parallel(n, func(i int) error {
		for j := range 10 {
			obj := &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "bench.example.com/v1", "kind": "Gadget",
				"metadata": map[string]interface{}{"name": fmt.Sprintf("g-%d", j), "namespace": "default"},
				"spec":     map[string]interface{}{"size": int64(j)},
			}}
			if _, err := dyns[i].Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return r, err
	}
	time.Sleep(3 * time.Second)
	r.rssObjects, r.gorObjects = rssMiB(s.cmd.Process.Pid), s.goroutines()
	log("%d custom resources: RSS %.0f MiB, %d goroutines", n*10, r.rssObjects, r.gorObjects)

	var mu sync.Mutex
	var steady []time.Duration
	if err := parallel(n, func(i int) error {
		for j := range 10 {
			t := time.Now()
			if _, err := dyns[i].Namespace("default").Get(ctx, fmt.Sprintf("g-%d", j), metav1.GetOptions{}); err != nil {
				return err
			}
			mu.Lock()
			steady = append(steady, time.Since(t))
			mu.Unlock()
		}
		return nil
	}); err != nil {
		return r, err
	}
	r.steadyP50, r.steadyP99 = percentile(steady, 0.5), percentile(steady, 0.99)
	// The same loop on a built-in resource, for comparison.
	var builtin []time.Duration
	if err := parallel(n, func(i int) error {
		cfg, err := s.config(fmt.Sprintf("root:crd-%d", i))
		if err != nil {
			return err
		}
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		cms := d.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default")
		for range 10 {
			t := time.Now()
			if _, err := cms.Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
				return err
			}
			mu.Lock()
			builtin = append(builtin, time.Since(t))
			mu.Unlock()
		}
		return nil
	}); err != nil {
		return r, err
	}
	r.builtinP50, r.builtinP99 = percentile(builtin, 0.5), percentile(builtin, 0.99)
	log("first request p50 %s p99 %s; steady get p50 %s p99 %s", r.firstP50, r.firstP99, r.steadyP50, r.steadyP99)
	return r, nil
}

func renderCRDs(r *crdResult) string {
	if r == nil {
		return ""
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nPer-cluster CRDs (SQLite; %d workspaces, each with its own CRD of one version and a schema of its own, then 10 custom resources each; %d concurrent clients):\n\n", r.clusters, *clients)
	fmt.Fprintf(&b, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| CRDs created and established | %.0f/s |\n", r.crdsPerSec)
	fmt.Fprintf(&b, "| RSS: workspaces -> + CRDs -> + served, 10 objects each | %.0f -> %.0f -> %.0f MiB |\n", r.rssWorkspaces, r.rssCRDs, r.rssObjects)
	fmt.Fprintf(&b, "| marginal RSS per cluster with one served CRD and 10 objects | %.0f KiB |\n", (r.rssObjects-r.rssWorkspaces)*1024/float64(r.clusters))
	fmt.Fprintf(&b, "| goroutines: workspaces -> served CRDs with objects | %d -> %d |\n", r.gorWorkspaces, r.gorObjects)
	fmt.Fprintf(&b, "| first request in a cold cluster (list; builds its serving state) p50 / p99 | %s / %s |\n", ms(r.firstP50), ms(r.firstP99))
	fmt.Fprintf(&b, "| steady-state get of a custom resource p50 / p99 | %s / %s |\n", ms(r.steadyP50), ms(r.steadyP99))
	fmt.Fprintf(&b, "| the same gets of a built-in object (config map), for comparison, p50 / p99 | %s / %s |\n", ms(r.builtinP50), ms(r.builtinP99))
	return b.String()
}
