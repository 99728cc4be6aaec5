package e2e

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestExportViewListAndWatch: what a provider's controller relies on when
// it lists and watches its APIExport's view across consumers (served from
// a watch cache of the export's objects, docs/architecture.md):
//   - an informer on the view lists every consumer's objects and then
//     hears of every create, update and delete in every consumer, ending
//     with exactly the objects, at exactly the resourceVersions, that the
//     consumers themselves hold;
//   - a watch opened from a list's resourceVersion delivers every change
//     made after that list, those made before the watch opened included,
//     once each, in order, and nothing else;
//   - a list in pages (limit and continue) while consumers keep writing
//     returns each object exactly once, every object that existed before
//     it started, all at the first page's resourceVersion;
//   - a workspace that did not bind the export, with a CRD of its own for
//     the same group and resource, writing all along, never shows up.
func TestExportViewListAndWatch(t *testing.T) {
	for _, d := range []framework.Dialect{framework.SQLite, framework.Postgres} {
		t.Run(string(d), func(t *testing.T) { testExportViewListAndWatch(t, framework.DatastoreFor(t, d)) })
	}
}

func testExportViewListAndWatch(t *testing.T, datastore string) {
	s := framework.StartServer(t, datastore)
	consumers := []string{"root:team-a", "root:team-b", "root:team-c"}
	const outsider = "root:outsider"
	s.CreateWorkspaces(append([]string{"root:platform", outsider}, consumers...)...)
	publishDatabases(t, s, "root:platform", "", "")
	framework.Eventually(t, 20*time.Second, "the export's identity", func() (bool, string) {
		out, _ := s.KubectlErr("root:platform", "", "get", "apiexport", "databases", "-o", "jsonpath={.status.identityHash}")
		return len(out) > 10, out
	})
	for _, c := range consumers {
		if out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "bind", "export", "root:platform:databases", "--server", s.URL()+"/clusters/"+c); err != nil {
			t.Fatalf("binding in %s: %v\n%s", c, err, out)
		}
	}
	if out, err := s.KubectlErr(outsider, framework.NamespacedCRD("platform.example.com", "databases", "Database", "{type: object, x-kubernetes-preserve-unknown-fields: true}"), "apply", "-f", "-"); err != nil {
		t.Fatalf("root:outsider's own CRD: %v\n%s", err, out)
	}
	s.WaitEstablished(outsider, "crd/databases.platform.example.com")

	ctx := context.Background()
	clients := map[string]dynamic.ResourceInterface{}
	for _, c := range append([]string{outsider}, consumers...) {
		d, err := dynamic.NewForConfig(s.Config(c))
		if err != nil {
			t.Fatal(err)
		}
		clients[c] = d.Resource(databasesGVR).Namespace("default")
	}
	create := func(c, name string, size int) {
		t.Helper()
		obj := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "platform.example.com/v1", "kind": "Database",
			"metadata": map[string]interface{}{"name": name, "namespace": "default"},
			"spec":     map[string]interface{}{"size": int64(size)},
		}}
		if _, err := clients[c].Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating database %s in %s: %v", name, c, err)
		}
	}
	update := func(c, name string, size int) {
		t.Helper()
		if _, err := clients[c].Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"size":%d}}`, size)), metav1.PatchOptions{}); err != nil {
			t.Fatalf("updating database %s in %s: %v", name, c, err)
		}
	}
	del := func(c, name string) {
		t.Helper()
		if err := clients[c].Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting database %s in %s: %v", name, c, err)
		}
	}
	for _, c := range append([]string{outsider}, consumers...) {
		for i := range 5 {
			create(c, fmt.Sprintf("db%d", i), i)
		}
	}
	// truth is what the consumers hold, read from each: cluster/name ->
	// resourceVersion.
	truth := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, c := range consumers {
			l, err := clients[c].List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing databases in %s: %v", c, err)
			}
			for _, o := range l.Items {
				out[c+"/"+o.GetName()] = o.GetResourceVersion()
			}
		}
		return out
	}
	bound := map[string]bool{}
	for _, c := range consumers {
		bound[c] = true
	}
	key := func(o *unstructured.Unstructured) string {
		return string(clusterinformer.ClusterOf(o)) + "/" + o.GetName()
	}

	view := viewConfig(t, s, "root:platform", "databases", "admin", "system:masters")

	// An informer on the view.
	inf, err := clusterinformer.Dynamic(view, databasesGVR)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deleted, foreign := map[string]bool{}, map[string]bool{}
	heard := func(obj interface{}, deletion bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !bound[string(clusterinformer.ClusterOf(u))] {
			foreign[key(u)] = true
		}
		if deletion {
			deleted[key(u)] = true
		}
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { heard(obj, false) },
		UpdateFunc: func(_, obj interface{}) { heard(obj, false) },
		DeleteFunc: func(obj interface{}) { heard(obj, true) },
	})
	infCtx, stopInf := context.WithCancel(ctx)
	defer stopInf()
	inf.Start(infCtx)
	if err := inf.WaitForCacheSync(infCtx); err != nil {
		t.Fatal(err)
	}
	cached := func() map[string]string {
		out := map[string]string{}
		for _, o := range inf.Indexer().List() {
			u := o.(*unstructured.Unstructured)
			out[key(u)] = u.GetResourceVersion()
		}
		return out
	}
	if got, want := cached(), truth(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the informer's first list holds\n%v\nwant what the consumers hold\n%v", sortedKeys(got), sortedKeys(want))
	}
	for _, c := range consumers {
		create(c, "new0", 10)
		create(c, "new1", 11)
		update(c, "db0", 100)
		update(c, "db1", 101)
		update(c, "db0", 102)
		del(c, "db4")
		create(outsider, "x-"+strings.TrimPrefix(c, "root:"), 1)
		update(outsider, "db0", 7)
	}
	framework.Eventually(t, 30*time.Second, "the informer to hold what the consumers hold, at their resourceVersions", func() (bool, string) {
		got, want := cached(), truth()
		return reflect.DeepEqual(got, want), fmt.Sprintf("informer %v\nconsumers %v", got, want)
	})
	mu.Lock()
	for _, c := range consumers {
		if !deleted[c+"/db4"] {
			t.Errorf("the informer did not hear of the deletion of %s/db4", c)
		}
	}
	if len(foreign) > 0 {
		t.Errorf("the informer heard of objects of workspaces that did not bind the export: %v", sortedKeys(foreign))
	}
	mu.Unlock()

	// A list, then changes, then a watch from the list's resourceVersion,
	// then more changes: the watch delivers all of them, in order.
	vd, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(view))
	if err != nil {
		t.Fatal(err)
	}
	vr := vd.Resource(databasesGVR)
	list, err := vr.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing through the view: %v", err)
	}
	listed := map[string]string{}
	for i := range list.Items {
		listed[key(&list.Items[i])] = list.Items[i].GetResourceVersion()
	}
	if want := truth(); !reflect.DeepEqual(listed, want) {
		t.Fatalf("a list through the view holds\n%v\nwant what the consumers hold\n%v", listed, want)
	}
	var want []string
	for i, c := range consumers {
		create(c, fmt.Sprintf("w%d", i), i)
		want = append(want, "ADDED "+c+fmt.Sprintf("/w%d", i))
		update(c, fmt.Sprintf("w%d", i), 50+i)
		want = append(want, "MODIFIED "+c+fmt.Sprintf("/w%d", i))
		del(c, "new0")
		want = append(want, "DELETED "+c+"/new0")
		create(outsider, fmt.Sprintf("w%d", i), i)
	}
	w, err := vr.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watching through the view from resourceVersion %s: %v", list.GetResourceVersion(), err)
	}
	defer w.Stop()
	for _, c := range consumers {
		update(c, "db2", 200)
		want = append(want, "MODIFIED "+c+"/db2")
		update(outsider, "db2", 200)
	}
	// The last change, so that anything delivered before it but not
	// wanted is seen.
	create(consumers[0], "last", 1)
	want = append(want, "ADDED "+consumers[0]+"/last")
	var got []string
	lastRV := uint64(0)
	timeout := time.After(30 * time.Second)
	for len(got) == 0 || got[len(got)-1] != "ADDED "+consumers[0]+"/last" {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the view's watch ended after %v", got)
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				t.Fatalf("the view's watch delivered %s %T: %v", ev.Type, ev.Object, ev.Object)
			}
			rv, _ := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
			if rv <= lastRV {
				t.Errorf("the view's watch delivered %s %s at resourceVersion %d after %d", ev.Type, key(u), rv, lastRV)
			}
			lastRV = rv
			got = append(got, string(ev.Type)+" "+key(u))
		case <-timeout:
			t.Fatalf("after 30 s the view's watch from resourceVersion %s had delivered\n%s\nwant\n%s", list.GetResourceVersion(), strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the view's watch from resourceVersion %s delivered\n%s\nwant\n%s", list.GetResourceVersion(), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Pages of 4 while every consumer (and root:outsider) keeps writing.
	before := truth()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c := consumers[i%len(consumers)]
			for _, step := range []func() error{
				func() error {
					_, err := clients[c].Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
						"apiVersion": "platform.example.com/v1", "kind": "Database",
						"metadata": map[string]interface{}{"name": fmt.Sprintf("p%d", i), "namespace": "default"},
						"spec":     map[string]interface{}{"size": int64(i)},
					}}, metav1.CreateOptions{})
					return err
				},
				func() error {
					_, err := clients[c].Patch(ctx, "db1", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"size":%d}}`, i)), metav1.PatchOptions{})
					return err
				},
				func() error {
					_, err := clients[outsider].Patch(ctx, "db1", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"size":%d}}`, i)), metav1.PatchOptions{})
					return err
				},
			} {
				if err := step(); err != nil {
					writeErr = err
					return
				}
			}
		}
	}()
	seen := map[string]int{}
	pages, cont, pageRV := 0, "", ""
	for {
		l, err := vr.List(ctx, metav1.ListOptions{Limit: 4, Continue: cont})
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("page %d through the view: %v", pages+1, err)
		}
		if pages == 0 {
			pageRV = l.GetResourceVersion()
		} else if l.GetResourceVersion() != pageRV {
			t.Errorf("page %d is at resourceVersion %s, the first at %s", pages+1, l.GetResourceVersion(), pageRV)
		}
		listRV, _ := strconv.ParseUint(pageRV, 10, 64)
		for i := range l.Items {
			o := &l.Items[i]
			seen[key(o)]++
			if rv, _ := strconv.ParseUint(o.GetResourceVersion(), 10, 64); rv > listRV {
				t.Errorf("page %d holds %s at resourceVersion %d, newer than the list's %d", pages+1, key(o), rv, listRV)
			}
		}
		pages++
		if cont = l.GetContinue(); cont == "" {
			break
		}
	}
	close(stop)
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("writing while the view was paged: %v", writeErr)
	}
	if pages < len(before)/4 {
		t.Fatalf("%d objects came in %d pages of at most 4", len(before), pages)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("the pages held %s %d times", k, n)
		}
		if c, _, _ := strings.Cut(k, "/"); !bound[c] {
			t.Errorf("the pages held %s, of a workspace that did not bind the export", k)
		}
	}
	for k := range before {
		if seen[k] == 0 {
			t.Errorf("the pages missed %s, which existed before the first page", k)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
