package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/client/clusterreconcile"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

const ccLabel = "e2e.example.com/clusterclient"

// TestClusterClient drives the client library for controllers across
// workspaces (client/clusterinformer, client/clusterreconcile) with the
// pinned client-go and controller-runtime against the real server:
// same-named config maps in ten workspaces all reach the cache under their
// own cluster (where a stock client-go informer on /clusters/* collapses
// them), events name the right cluster and kind, a controller-runtime
// manager reconciles every workspace's object and writes only to that
// workspace, and a credential without the wildcard grant gets a clear 403
// instead of a silent hang.
func TestClusterClient(t *testing.T) {
	ctrllog.SetLogger(klog.NewKlogr())
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var workspaces []logicalcluster.Name
		for i := 0; i < 10; i++ {
			workspaces = append(workspaces, logicalcluster.Name(fmt.Sprintf("root:cc-%d", i)))
		}
		for _, ws := range workspaces {
			s.CreateWorkspaces(string(ws))
		}
		// Per workspace: two config maps named alike everywhere, one of its
		// own; the reconciler below acts on "shared" only (label reconcile=yes).
		created := 0
		for i, ws := range workspaces {
			cms := s.Client(string(ws)).CoreV1().ConfigMaps("default")
			for name, lbl := range map[string]map[string]string{
				"shared":                  {ccLabel: "yes", "reconcile": "yes"},
				"shared-plain":            {ccLabel: "yes"},
				fmt.Sprintf("only-%d", i): {ccLabel: "yes"},
			} {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}, Data: map[string]string{"owner": string(ws)}}
				if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				created++
			}
		}
		// Any config of the admin works: the library aims it at /clusters/*.
		cfg := s.Config("root")
		sel := labels.SelectorFromSet(labels.Set{ccLabel: "yes"})

		t.Run("a stock client-go informer is refused, with a message naming the library", func(t *testing.T) {
			// Its store is keyed by namespace/name: it would hold 12 of
			// the config maps (2 shared names + 10 own) and lose the rest
			// without an error. The server refuses its requests instead.
			dyn, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(cfg))
			if err != nil {
				t.Fatal(err)
			}
			f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "", func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
			inf := f.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Informer()
			var mu sync.Mutex
			var seen string
			inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
				mu.Lock()
				seen = err.Error()
				mu.Unlock()
			})
			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			f.Start(sctx.Done())
			framework.Eventually(t, 30*time.Second, "the stock informer's error", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return strings.Contains(seen, "github.com/kcpsql/kcp/client/clusterinformer"), seen
			})
			if inf.HasSynced() || len(inf.GetStore().List()) != 0 {
				t.Errorf("the stock informer synced %d objects", len(inf.GetStore().List()))
			}
		})

		t.Run("the stock reflector's shapes are refused, kubectl's and the library's are not", func(t *testing.T) {
			admin := framework.UserClient(t, s, "admin", "system:masters")
			base := s.URL() + "/clusters/*/api/v1/configmaps?labelSelector=" + ccLabel + "%3Dyes"
			for q, want := range map[string]int{
				"&resourceVersion=0&limit=500": 400,
				"&watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true": 400,
				"&limit=500":         200,
				"&resourceVersion=0": 200,
			} {
				code, body := framework.Do(t, admin, "GET", base+q, "")
				if code != want || (want == 400 && !strings.Contains(body, "client/clusterinformer")) || (want == 200 && strings.Count(body, `"kind":"ConfigMap"`)+strings.Count(body, `"name":"cc-`) == 0 && !strings.Contains(body, `"items"`)) {
					t.Errorf("GET %s: %d, want %d\n%.300s", q, code, want, body)
				}
			}
			if out := s.Kubectl("root", "--server", s.URL()+"/clusters/*", "get", "configmaps", "-A", "-l", ccLabel+"=yes", "-o", "name"); strings.Count(out, "configmap/") != created {
				t.Errorf("kubectl get across all workspaces: %d of %d\n%s", strings.Count(out, "configmap/"), created, out)
			}
		})

		cs, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		inf := clusterinformer.Typed[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(""), clusterinformer.WithResource(corev1.Resource("configmaps")))
		ictx, icancel := context.WithCancel(ctx)
		defer icancel()
		inf.Start(ictx)
		if err := inf.WaitForCacheSync(ctx); err != nil {
			t.Fatal(err)
		}

		t.Run("informer caches every object under its cluster", func(t *testing.T) {
			l := inf.Lister()
			all, err := l.List(sel)
			if err != nil || len(all) != created {
				t.Fatalf("List across clusters: %d objects (%v), want %d", len(all), err, created)
			}
			for i, ws := range workspaces {
				own, _ := l.Cluster(ws).Namespace("default").List(sel)
				names := ccNames(own)
				if want := []string{"only-" + fmt.Sprint(i), "shared", "shared-plain"}; strings.Join(names, ",") != strings.Join(want, ",") {
					t.Errorf("%s: lister has %v, want %v", ws, names, want)
				}
				for _, o := range own {
					if clusterinformer.ClusterOf(o) != ws || o.Data["owner"] != string(ws) {
						t.Errorf("%s: %s is of %s (owner %q)", ws, o.Name, clusterinformer.ClusterOf(o), o.Data["owner"])
					}
				}
				got, err := l.Cluster(ws).Namespace("default").Get("shared")
				if err != nil || got.Data["owner"] != string(ws) {
					t.Errorf("%s: Get(shared) = %v, %v", ws, got, err)
				}
			}
			if _, err := l.Cluster(workspaces[0]).Namespace("default").Get("only-1"); !apierrors.IsNotFound(err) {
				t.Errorf("Get of another workspace's object: %v, want NotFound", err)
			}

			// The same through the dynamic constructor (unstructured objects).
			dinf, err := clusterinformer.Dynamic(cfg, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
			if err != nil {
				t.Fatal(err)
			}
			dctx, dcancel := context.WithCancel(ctx)
			defer dcancel()
			dinf.Start(dctx)
			if err := dinf.WaitForCacheSync(ctx); err != nil {
				t.Fatal(err)
			}
			if all, _ := dinf.Lister().List(sel); len(all) != created {
				t.Errorf("dynamic informer: %d objects, want %d", len(all), created)
			}
			if u, err := dinf.Lister().Cluster(workspaces[5]).Namespace("default").Get("shared"); err != nil || u.GetAnnotations()[logicalcluster.Annotation] != string(workspaces[5]) {
				t.Errorf("dynamic Get(shared) in %s: %v, %v", workspaces[5], u, err)
			}
		})

		t.Run("events name the cluster and the kind of change", func(t *testing.T) {
			var mu sync.Mutex
			var events []string
			record := func(kind string, obj interface{}) {
				c, ns, n, ok := clusterinformer.NameOf(obj)
				if !ok || ns != "default" || !strings.HasPrefix(n, "fresh") && n != "shared-plain" {
					return
				}
				mu.Lock()
				events = append(events, fmt.Sprintf("%s %s|%s", kind, c, n))
				mu.Unlock()
			}
			inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj interface{}) { record("add", obj) },
				UpdateFunc: func(_, obj interface{}) { record("update", obj) },
				DeleteFunc: func(obj interface{}) { record("delete", obj) },
			})
			// The replayed adds of existing objects: one per workspace.
			framework.Eventually(t, 10*time.Second, "replayed adds", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return len(events) == len(workspaces), fmt.Sprint(events)
			})
			mu.Lock()
			events = nil
			mu.Unlock()
			a, b := workspaces[3], workspaces[7]
			var want []string
			for _, ws := range []logicalcluster.Name{a, b} {
				cms := s.Client(string(ws)).CoreV1().ConfigMaps("default")
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if _, err := cms.Patch(ctx, "shared-plain", "application/merge-patch+json", []byte(`{"data":{"touched":"yes"}}`), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := cms.Delete(ctx, "fresh", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				want = append(want, "add "+string(ws)+"|fresh", "update "+string(ws)+"|shared-plain", "delete "+string(ws)+"|fresh")
			}
			sort.Strings(want)
			framework.Eventually(t, 20*time.Second, "add, update and delete events of both workspaces", func() (bool, string) {
				mu.Lock()
				got := append([]string(nil), events...)
				mu.Unlock()
				sort.Strings(got)
				return strings.Join(got, "\n") == strings.Join(want, "\n"), fmt.Sprintf("got %v, want %v", got, want)
			})
		})

		t.Run("controller-runtime reconciler over all workspaces", func(t *testing.T) {
			ccReconcileAll(ctx, t, s, cfg, workspaces)
		})

		t.Run("no wildcard grant: a clear Forbidden", func(t *testing.T) {
			ccRefused(ctx, t, s)
		})
	})
}

func ccNames(objs []*corev1.ConfigMap) []string {
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
	}
	sort.Strings(names)
	return names
}

const ccAnnotation = "e2e.example.com/reconciled-in"

// ccReconcileAll runs a manager with leader election and a reconciler that
// annotates every config map labelled reconcile=yes with the cluster its
// request named, through that cluster's client.
func ccReconcileAll(ctx context.Context, t *testing.T, s *framework.Server, cfg *rest.Config, workspaces []logicalcluster.Name) {
	mgr, err := manager.New(cfg, manager.Options{
		LeaderElection:                true,
		LeaderElectionID:              "clusterclient-e2e",
		LeaderElectionNamespace:       "default",
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	clients, err := clusterreconcile.NewClients(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	inf := clusterinformer.Typed[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(""), clusterinformer.WithResource(corev1.Resource("configmaps")))
	lister := inf.Lister()

	var mu sync.Mutex
	requests := map[string]int{}
	r := reconcile.TypedFunc[clusterreconcile.Request](func(ctx context.Context, req clusterreconcile.Request) (reconcile.Result, error) {
		mu.Lock()
		requests[req.String()]++
		mu.Unlock()
		cached, err := lister.Cluster(req.Cluster).Namespace(req.Namespace).Get(req.Name)
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		if err != nil || cached.Annotations[ccAnnotation] == string(req.Cluster) {
			return reconcile.Result{}, err
		}
		c, err := clients.Cluster(req.Cluster)
		if err != nil {
			return reconcile.Result{}, err
		}
		cm := cached.DeepCopy()
		patch := client.MergeFrom(cached)
		cm.Annotations[ccAnnotation] = string(req.Cluster)
		return reconcile.Result{}, c.Patch(ctx, cm, patch)
	})
	src := clusterreconcile.NewSource(inf).WithFilter(func(cm *corev1.ConfigMap) bool { return cm.Labels["reconcile"] == "yes" })
	err = builder.TypedControllerManagedBy[clusterreconcile.Request](mgr).
		Named("annotate-across-workspaces").
		WithOptions(controller.TypedOptions[clusterreconcile.Request]{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(src).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		mcancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	select {
	case <-mgr.Elected():
	case <-time.After(60 * time.Second):
		t.Fatal("the manager was not elected leader")
	}

	// Every workspace's "shared" carries its own workspace; nothing else
	// anywhere carries the annotation.
	framework.Eventually(t, 60*time.Second, "every workspace's object reconciled", func() (bool, string) {
		for _, ws := range workspaces {
			cm, err := s.Client(string(ws)).CoreV1().ConfigMaps("default").Get(ctx, "shared", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if cm.Annotations[ccAnnotation] != string(ws) {
				return false, fmt.Sprintf("%s: annotation %q", ws, cm.Annotations[ccAnnotation])
			}
		}
		return true, ""
	})
	for _, ws := range workspaces {
		list, err := s.Client(string(ws)).CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range list.Items {
			v, ok := cm.Annotations[ccAnnotation]
			switch {
			case cm.Namespace == "default" && cm.Name == "shared":
				if v != string(ws) || cm.Data["owner"] != string(ws) {
					t.Errorf("%s: shared annotated %q, owner %q", ws, v, cm.Data["owner"])
				}
			case ok:
				t.Errorf("%s: %s/%s was written to (annotated %q) but is not labelled", ws, cm.Namespace, cm.Name, v)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for key := range requests {
		c, ns, n, _ := clusterinformer.SplitKey(key)
		if ns != "default" || n != "shared" || !ccContains(workspaces, c) {
			t.Errorf("unexpected request %s", key)
		}
	}
	if len(requests) != len(workspaces) {
		t.Errorf("requests for %d objects, want %d: %v", len(requests), len(workspaces), requests)
	}
}

func ccContains(list []logicalcluster.Name, n logicalcluster.Name) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

// ccRefused: an identity without the wildcard grant (a plain user, here
// with a client certificate) gets the server's 403 from the library, both
// from the informer and as the error a manager's Start returns.
func ccRefused(ctx context.Context, t *testing.T, s *framework.Server) {
	hc := framework.UserClient(t, s, "cc-nobody")
	cfg := &rest.Config{Host: s.URL() + "/clusters/root", Transport: hc.Transport}
	cs, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	inf := clusterinformer.Typed[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(""), clusterinformer.WithResource(corev1.Resource("configmaps")))
	ictx, icancel := context.WithTimeout(ctx, 60*time.Second)
	defer icancel()
	inf.Start(ictx)
	start := time.Now()
	err = inf.WaitForCacheSync(ictx)
	var refused *clusterinformer.RefusedError
	if !errors.As(err, &refused) || !apierrors.IsForbidden(err) {
		t.Fatalf("WaitForCacheSync without the grant: %v, want a RefusedError wrapping 403", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %s", d)
	}
	t.Logf("informer: %v", err)

	// The same through controller-runtime: the manager fails to start.
	mgr, err := manager.New(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	inf2 := clusterinformer.Typed[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(""), clusterinformer.WithResource(corev1.Resource("configmaps")))
	err = builder.TypedControllerManagedBy[clusterreconcile.Request](mgr).Named("refused").
		WithOptions(controller.TypedOptions[clusterreconcile.Request]{SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(clusterreconcile.NewSource(inf2)).
		Complete(reconcile.TypedFunc[clusterreconcile.Request](func(context.Context, clusterreconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithTimeout(ctx, 60*time.Second)
	defer mcancel()
	start = time.Now()
	err = mgr.Start(mctx)
	if !errors.As(err, &refused) || time.Since(start) > 20*time.Second {
		t.Fatalf("manager.Start without the grant after %s: %v, want a RefusedError", time.Since(start), err)
	}
	t.Logf("manager: %v", err)
}
