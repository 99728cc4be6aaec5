package clusterinformer

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		cluster         logicalcluster.Name
		namespace, name string
		key             string
	}{
		{"root:a", "default", "cm", "root:a|default/cm"},
		{"root:a:b", "", "node", "root:a:b|node"},
		{"root", "kube-system", "x.y", "root|kube-system/x.y"},
	} {
		k := Key(tc.cluster, tc.namespace, tc.name)
		if k != tc.key {
			t.Errorf("Key(%q, %q, %q) = %q, want %q", tc.cluster, tc.namespace, tc.name, k, tc.key)
		}
		c, ns, n, err := SplitKey(k)
		if err != nil || c != tc.cluster || ns != tc.namespace || n != tc.name {
			t.Errorf("SplitKey(%q) = %q %q %q %v", k, c, ns, n, err)
		}
	}
	if _, _, _, err := SplitKey("default/cm"); err == nil {
		t.Error("SplitKey accepted a key without a cluster")
	}
	if _, err := KeyFunc(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}); err == nil {
		t.Error("KeyFunc accepted an object without the cluster annotation")
	}
}

func TestForCluster(t *testing.T) {
	for host, want := range map[string]string{
		"https://h:6443":                            "https://h:6443/clusters/root:a",
		"https://h:6443/":                           "https://h:6443/clusters/root:a",
		"https://h:6443/clusters/root":              "https://h:6443/clusters/root:a",
		"https://h:6443/clusters/*":                 "https://h:6443/clusters/root:a",
		"https://h/services/syncer/x/pc":            "https://h/services/syncer/x/pc/clusters/root:a",
		"https://h/services/syncer/x/pc/clusters/*": "https://h/services/syncer/x/pc/clusters/root:a",
	} {
		if got := ForCluster(&rest.Config{Host: host}, "root:a").Host; got != want {
			t.Errorf("ForCluster(%q) = %q, want %q", host, got, want)
		}
	}
}

func cm(cluster, ns, name string, lbls map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, Labels: lbls,
		Annotations: map[string]string{logicalcluster.Annotation: cluster},
	}}
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) { r.mu.Lock(); r.events = append(r.events, s); r.mu.Unlock() }

func (r *recorder) handler() cache.ResourceEventHandler {
	key := func(obj interface{}) string { k, _ := KeyFunc(obj); return k }
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { r.add("add " + key(obj)) },
		UpdateFunc: func(_, obj interface{}) { r.add("update " + key(obj)) },
		DeleteFunc: func(obj interface{}) { r.add("delete " + key(obj)) },
	}
}

func (r *recorder) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		got := append([]string(nil), r.events...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("saw %v, want %d events", r.events, n)
	return nil
}

// source lists and watches config maps of several clusters in memory.
// (client-go's FakeControllerSource keys by namespace/name: it collapses
// equal names of two clusters, the very trap this package avoids.)
type source struct {
	mu       sync.Mutex
	rv       int
	items    map[string]*corev1.ConfigMap
	watchers []*watch.RaceFreeFakeWatcher
}

func newSource() *source { return &source{items: map[string]*corev1.ConfigMap{}} }

func (s *source) change(t watch.EventType, obj *corev1.ConfigMap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	obj = obj.DeepCopy()
	obj.ResourceVersion = strconv.Itoa(s.rv)
	k, _ := KeyFunc(obj)
	if t == watch.Deleted {
		delete(s.items, k)
	} else {
		s.items[k] = obj
	}
	for _, w := range s.watchers {
		w.Action(t, obj)
	}
}

func (s *source) Add(obj *corev1.ConfigMap)    { s.change(watch.Added, obj) }
func (s *source) Modify(obj *corev1.ConfigMap) { s.change(watch.Modified, obj) }
func (s *source) Delete(obj *corev1.ConfigMap) { s.change(watch.Deleted, obj) }

func (s *source) List(metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}}
	for _, o := range s.items {
		l.Items = append(l.Items, *o.DeepCopy())
	}
	return l, nil
}

func (s *source) Watch(metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := watch.NewRaceFreeFake()
	s.watchers = append(s.watchers, w)
	return w, nil
}

// TestInformerKeepsEqualNamesApart feeds objects of equal names in several
// clusters through the informer and checks the cache, the listers and the
// events.
func TestInformerKeepsEqualNamesApart(t *testing.T) {
	src := newSource()
	for _, c := range []string{"root:a", "root:b", "root:c"} {
		src.Add(cm(c, "default", "settings", map[string]string{"app": "x"}))
		src.Add(cm(c, "other", "settings", nil))
	}
	src.Add(cm("root:b", "default", "only-b", map[string]string{"app": "y"}))

	inf := New[*corev1.ConfigMap](src, WithResource(corev1.Resource("configmaps")))
	early := &recorder{}
	inf.AddEventHandler(early.handler())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf.Start(ctx)
	inf.Start(ctx) // a second Start is a no-op
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := early.wait(t, 7); len(got) != 7 {
		t.Errorf("initial events: %v", got)
	}

	l := inf.Lister()
	all, _ := l.List(labels.Everything())
	if len(all) != 7 {
		t.Errorf("List across clusters: %d objects, want 7", len(all))
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "x"})
	if x, _ := l.List(sel); len(x) != 3 {
		t.Errorf("List app=x: %d, want 3", len(x))
	}
	if b, _ := l.Cluster("root:b").List(nil); len(b) != 3 {
		t.Errorf("root:b: %d objects, want 3", len(b))
	}
	if d, _ := l.Cluster("root:b").Namespace("default").List(labels.Everything()); len(d) != 2 {
		t.Errorf("root:b/default: %d objects, want 2", len(d))
	}
	got, err := l.Cluster("root:c").Namespace("other").Get("settings")
	if err != nil || ClusterOf(got) != "root:c" || got.Namespace != "other" {
		t.Errorf("Get root:c other/settings = %v, %v", got, err)
	}
	if _, err := l.Cluster("root:a").Namespace("default").Get("only-b"); !apierrors.IsNotFound(err) {
		t.Errorf("Get of another cluster's object: %v, want NotFound", err)
	}

	// A handler added late sees what is there, once, then changes.
	late := &recorder{}
	inf.AddEventHandler(late.handler())
	late.wait(t, 7)
	upd := cm("root:a", "default", "settings", map[string]string{"app": "z"})
	src.Modify(upd)
	src.Add(cm("root:c", "default", "only-b", nil))
	src.Delete(cm("root:b", "default", "settings", nil))
	want := []string{"update root:a|default/settings", "add root:c|default/only-b", "delete root:b|default/settings"}
	for _, r := range []*recorder{early, late} {
		got := r.wait(t, 10)
		if len(got) != 10 || !equal(got[7:], want) {
			t.Errorf("events after sync: %v, want %v", got[7:], want)
		}
	}
	initial := late.events[:7]
	sort.Strings(initial)
	for i := 1; i < len(initial); i++ {
		if initial[i] == initial[i-1] {
			t.Errorf("late handler saw %q twice", initial[i])
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// refusingSource answers every list with 403, as the server does for a
// credential without the wildcard grant.
type refusingSource struct{ *source }

func (refusingSource) List(metav1.ListOptions) (runtime.Object, error) {
	return nil, apierrors.NewForbidden(corev1.Resource("configmaps"), "", nil)
}

func TestWaitForCacheSyncReportsRefusal(t *testing.T) {
	inf := New[*corev1.ConfigMap](refusingSource{newSource()}, WithResource(corev1.Resource("configmaps")))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inf.Start(ctx)
	start := time.Now()
	err := inf.WaitForCacheSync(ctx)
	var refused *RefusedError
	if !apierrors.IsForbidden(err) || !asRefused(err, &refused) {
		t.Fatalf("WaitForCacheSync = %v, want a RefusedError wrapping Forbidden", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("refusal reported after %s", time.Since(start))
	}
	t.Logf("error: %v", err)
}

func asRefused(err error, target **RefusedError) bool {
	r, ok := err.(*RefusedError)
	*target = r
	return ok
}

// TestHandlerUntil: a handler added with a context hears changes until the
// context ends and nothing after, while the informer and its other
// handlers go on (a controller that loses its lease on a shared informer).
func TestHandlerUntil(t *testing.T) {
	src := newSource()
	src.Add(cm("root:a", "default", "one", nil))
	inf := New[*corev1.ConfigMap](src)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf.Start(ctx)
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if s := inf.Synced(); !s.HasSynced() {
		t.Error("Synced().HasSynced() = false after the informer synced")
	}
	stays, leaves := &recorder{}, &recorder{}
	inf.AddEventHandler(stays.handler())
	lease, lost := context.WithCancel(ctx)
	inf.AddEventHandlerUntil(lease, leaves.handler())
	src.Add(cm("root:a", "default", "two", nil))
	leaves.wait(t, 2)
	lost()
	// AfterFunc runs the removal on its own goroutine: wait until a
	// change reaches the remaining handler after it has run.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		inf.mu.Lock()
		n := len(inf.handlers)
		inf.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers registered after the lease ended, want 1", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	src.Add(cm("root:a", "default", "three", nil))
	stays.wait(t, 3)
	if got := leaves.wait(t, 2); len(got) != 2 {
		t.Errorf("handler heard %v after its context ended", got)
	}
}

// TestClusterView reads one cluster through a client-go informer and
// lister over the shared informer: upstream's keys, the namespace index,
// only that cluster's objects and events, and handlers gone when removed
// or when the view's context ends.
func TestClusterView(t *testing.T) {
	src := newSource()
	for _, c := range []string{"root:a", "root:b"} {
		src.Add(cm(c, "default", "settings", nil))
		src.Add(cm(c, "other", "settings", nil))
	}
	inf := New[*corev1.ConfigMap](src, WithResource(corev1.Resource("configmaps")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf.Start(ctx)
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	viewCtx, stopView := context.WithCancel(ctx)
	v := inf.ClusterView(viewCtx, "root:a")
	if !v.HasSynced() {
		t.Error("view of a synced informer has not synced")
	}
	lister := corev1listers.NewConfigMapLister(v.GetIndexer())
	all, _ := lister.List(labels.Everything())
	if len(all) != 2 {
		t.Errorf("view lists %d objects, want root:a's 2", len(all))
	}
	got, err := lister.ConfigMaps("other").Get("settings")
	if err != nil || ClusterOf(got) != "root:a" {
		t.Errorf("Get other/settings = %v, %v; want root:a's", got, err)
	}
	if d, _ := lister.ConfigMaps("default").List(labels.Everything()); len(d) != 1 || ClusterOf(d[0]) != "root:a" {
		t.Errorf("namespace default: %v", d)
	}
	keys := v.GetStore().ListKeys()
	sort.Strings(keys)
	if !equal(keys, []string{"default/settings", "other/settings"}) {
		t.Errorf("keys %v, want client-go's", keys)
	}
	if err := v.GetStore().Add(cm("root:a", "default", "x", nil)); err == nil {
		t.Error("a view's store accepted a write")
	}

	first, second := &recorder{}, &recorder{}
	reg, err := v.AddEventHandler(first.handler())
	if err != nil || !reg.HasSynced() {
		t.Fatalf("AddEventHandler: %v, synced %v", err, reg != nil && reg.HasSynced())
	}
	if _, err := v.AddEventHandler(second.handler()); err != nil {
		t.Fatal(err)
	}
	first.wait(t, 2)
	second.wait(t, 2)
	src.Add(cm("root:b", "default", "b-only", nil))
	src.Add(cm("root:a", "default", "a-new", nil))
	if got := first.wait(t, 3); got[2] != "add root:a|default/a-new" {
		t.Errorf("events: %v (root:b's add must not be among them)", got)
	}
	// Removed, the first handler hears nothing more; the second stops with
	// the view's context.
	if err := v.RemoveEventHandler(reg); err != nil {
		t.Fatal(err)
	}
	second.wait(t, 3)
	stopView()
	// The view's context removes its handlers soon after it ends.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		inf.mu.Lock()
		n := len(inf.byCluster["root:a"])
		inf.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers left after the view's context ended", n)
		}
	}
	src.Delete(cm("root:a", "default", "a-new", nil))
	src.Add(cm("root:b", "default", "sync-point", nil))
	all2 := &recorder{}
	inf.AddEventHandler(all2.handler())
	all2.wait(t, 6) // the informer has applied both changes
	time.Sleep(100 * time.Millisecond)
	if n := len(first.events); n != 3 {
		t.Errorf("removed handler saw %v", first.events)
	}
	if n := len(second.events); n != 3 {
		t.Errorf("handler of a stopped view saw %v", second.events)
	}
}

// TestKeepingController keeps only labelled config maps: others are not
// cached and their additions and changes are not heard of, but their
// deletions are; a kept object that stops qualifying leaves the cache with
// a change event.
func TestKeepingController(t *testing.T) {
	src := newSource()
	src.Add(cm("root:a", "default", "kept", map[string]string{"keep": "yes"}))
	src.Add(cm("root:a", "default", "plain", nil))
	rec := &recorder{}
	keep := func(obj interface{}) bool { return obj.(*corev1.ConfigMap).Labels["keep"] == "yes" }
	indexer, ctrl := NewKeepingController(src, &corev1.ConfigMap{}, nil, rec.handler(), func(obj interface{}) (interface{}, error) { return obj, nil }, keep)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		t.Fatal("not synced")
	}
	if keys := indexer.ListKeys(); len(keys) != 1 || keys[0] != "root:a|default/kept" {
		t.Errorf("cache holds %v, want the kept object alone", keys)
	}
	src.Modify(cm("root:a", "default", "plain", map[string]string{"other": "x"}))
	src.Delete(cm("root:a", "default", "plain", nil))
	src.Modify(cm("root:a", "default", "kept", nil)) // stops qualifying
	src.Add(cm("root:a", "default", "new", map[string]string{"keep": "yes"}))
	want := []string{"add root:a|default/kept", "delete root:a|default/plain", "update root:a|default/kept", "add root:a|default/new"}
	if got := rec.wait(t, 4); !equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if keys := indexer.ListKeys(); len(keys) != 1 || keys[0] != "root:a|default/new" {
		t.Errorf("cache holds %v, want root:a|default/new alone", keys)
	}
}

// TestSharedController feeds two caches from one list and one watch: each
// trims and keeps as its own, both hear every change in order, a deletion
// reaches the consumer that kept nothing of the object, and the source is
// listed and watched once.
func TestSharedController(t *testing.T) {
	src := &countingSource{source: newSource()}
	src.Add(cm("root:a", "default", "kept", map[string]string{"keep": "yes"}))
	src.Add(cm("root:b", "default", "kept", nil))
	all, some := &recorder{}, &recorder{}
	trimmed := func(obj interface{}) (interface{}, error) {
		c := obj.(*corev1.ConfigMap)
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, Labels: c.Labels,
			Annotations: map[string]string{logicalcluster.Annotation: c.Annotations[logicalcluster.Annotation]}}}, nil
	}
	keep := func(obj interface{}) bool { return obj.(*corev1.ConfigMap).Labels["keep"] == "yes" }
	ixs, ctrl := NewSharedController(src, &corev1.ConfigMap{},
		Consumer{Handler: all.handler()},
		Consumer{Handler: some.handler(), Trim: trimmed, Keep: keep})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		t.Fatal("not synced")
	}
	if keys := ixs[0].ListKeys(); len(keys) != 2 {
		t.Errorf("first cache holds %v, want both objects", keys)
	}
	if keys := ixs[1].ListKeys(); len(keys) != 1 || keys[0] != "root:a|default/kept" {
		t.Errorf("second cache holds %v, want root:a|default/kept alone", keys)
	}
	src.Modify(cm("root:b", "default", "kept", map[string]string{"keep": "yes", "big": "value"}))
	src.Delete(cm("root:a", "default", "kept", nil))
	wantAll := []string{"add root:a|default/kept", "add root:b|default/kept", "update root:b|default/kept", "delete root:a|default/kept"}
	if got := all.wait(t, 4); !equal(sorted(got[:2]), wantAll[:2]) || !equal(got[2:], wantAll[2:]) {
		t.Errorf("first consumer saw %v, want %v", got, wantAll)
	}
	wantSome := []string{"add root:a|default/kept", "add root:b|default/kept", "delete root:a|default/kept"}
	if got := some.wait(t, 3); !equal(got, wantSome) {
		t.Errorf("second consumer saw %v, want %v", got, wantSome)
	}
	obj, ok, _ := ixs[1].GetByKey("root:b|default/kept")
	if !ok || obj.(*corev1.ConfigMap).Labels["big"] != "value" || obj.(*corev1.ConfigMap).Data != nil {
		t.Errorf("second cache has %v, want the trimmed object with its new labels", obj)
	}
	if obj, _, _ := ixs[0].GetByKey("root:b|default/kept"); obj.(*corev1.ConfigMap).ResourceVersion == "" {
		t.Errorf("first cache has a trimmed object: %v", obj)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.lists != 1 || src.watches != 1 {
		t.Errorf("the source was listed %d and watched %d times, want once each", src.lists, src.watches)
	}
}

// A deletion that only a relist finds reaches each consumer of a shared
// informer with the object as that consumer kept it.
func TestSharedControllerRelistDeletion(t *testing.T) {
	src := newSource()
	src.Add(cm("root:a", "default", "x", map[string]string{"keep": "yes"}))
	trimmed := func(obj interface{}) (interface{}, error) {
		c := obj.(*corev1.ConfigMap).DeepCopy()
		c.Labels = map[string]string{"trimmed": "yes"}
		return c, nil
	}
	seen := make(chan interface{}, 2)
	deleted := func(obj interface{}) { seen <- obj }
	_, ctrl := NewSharedController(src, &corev1.ConfigMap{},
		Consumer{Handler: cache.ResourceEventHandlerFuncs{DeleteFunc: deleted}},
		Consumer{Handler: cache.ResourceEventHandlerFuncs{DeleteFunc: deleted}, Trim: trimmed})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		t.Fatal("not synced")
	}
	// The object goes without an event, and the watch expires: the relist
	// finds it gone.
	src.mu.Lock()
	delete(src.items, "root:a|default/x")
	for _, w := range src.watchers {
		w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"})
	}
	src.mu.Unlock()
	var got []string
	for len(got) < 2 {
		select {
		case obj := <-seen:
			d, ok := obj.(cache.DeletedFinalStateUnknown)
			if !ok {
				t.Fatalf("deletion of %T, want DeletedFinalStateUnknown", obj)
			}
			got = append(got, d.Obj.(*corev1.ConfigMap).Labels["keep"]+"/"+d.Obj.(*corev1.ConfigMap).Labels["trimmed"])
		case <-time.After(10 * time.Second):
			t.Fatalf("saw %v, want two deletions", got)
		}
	}
	if want := []string{"yes/", "/yes"}; !equal(got, want) {
		t.Errorf("consumers heard of the deletion with %v (keep/trimmed labels), want %v: each its own object", got, want)
	}
}

type countingSource struct {
	*source
	lists, watches int
}

func (s *countingSource) List(o metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.source.List(o)
}

func (s *countingSource) Watch(o metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	return s.source.Watch(o)
}

func sorted(s []string) []string { s = append([]string(nil), s...); sort.Strings(s); return s }

// ByNamespace finds namespaced objects through ByClusterNamespace and a
// cluster's cluster-scoped objects through ByCluster (they are not in
// ByClusterNamespace), never another cluster's.
func TestByNamespace(t *testing.T) {
	ix := cache.NewIndexer(KeyFunc, ClusterIndexers)
	for _, o := range []*corev1.ConfigMap{
		cm("root:a", "default", "x", nil), cm("root:a", "", "scoped", nil),
		cm("root:b", "default", "y", nil), cm("root:b", "", "other", nil),
	} {
		if err := ix.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ns string) []string {
		objs, err := ByNamespace(ix, "root:a", ns)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range objs {
			out = append(out, o.(*corev1.ConfigMap).Name)
		}
		return out
	}
	if got := names("default"); !equal(got, []string{"x"}) {
		t.Errorf("root:a default: %v", got)
	}
	if got := names(""); !equal(got, []string{"scoped"}) {
		t.Errorf("root:a cluster-scoped: %v", got)
	}
	if got, _ := ix.ByIndex(ByClusterNamespace, "root:a|"); len(got) != 0 {
		t.Errorf("cluster-scoped objects in ByClusterNamespace: %d", len(got))
	}
}
