package clusterstore

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/util/watchlist"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestCacheKeyFunc(t *testing.T) {
	const prefix = "/core/configmaps"
	upstream := func(obj runtime.Object) (string, error) {
		m := obj.(*corev1.ConfigMap)
		return prefix + "/" + m.Namespace + "/" + m.Name, nil
	}
	key := cacheKeyFunc(prefix, upstream)
	cm := func(ann map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", Annotations: ann}}
	}
	got, err := key(cm(map[string]string{logicalcluster.Annotation: "root:team-a"}))
	if err != nil || got != "/core/configmaps/root:team-a/ns/x" {
		t.Errorf("annotated object: %q, %v", got, err)
	}
	// Objects whose annotation is missing or cannot be a cluster go below
	// a segment that no request can address, never into a cluster.
	for _, ann := range []map[string]string{nil, {logicalcluster.Annotation: ""}, {logicalcluster.Annotation: "*"},
		{logicalcluster.Annotation: "root/team-b"}} {
		got, err := key(cm(ann))
		if err != nil || got != "/core/configmaps/"+unaddressable+"/ns/x" {
			t.Errorf("annotation %v: %q, %v", ann, got, err)
		}
	}
	if _, err := logicalcluster.Parse(unaddressable); err == nil || strings.Contains(unaddressable, "/") {
		t.Errorf("%q must not parse as a logical cluster", unaddressable)
	}
}

// recordingStore remembers the options of the last GetList.
type recordingStore struct {
	storage.Interface
	last storage.ListOptions
}

func (r *recordingStore) GetList(_ context.Context, _ string, opts storage.ListOptions, _ runtime.Object) error {
	r.last = opts
	return nil
}

func TestCacheSourceListsWholeAndPlain(t *testing.T) {
	rec := &recordingStore{}
	src := cacheSource{Interface: rec, fed: &atomic.Uint64{}}
	if !watchlist.DoesClientNotSupportWatchListSemantics(src) {
		t.Error("the cache's source offers WatchList; its reflector would key initial objects by namespace/name only")
	}
	opts := storage.ListOptions{Recursive: true, Predicate: storage.SelectionPredicate{Limit: 10000, Continue: "token"}}
	if err := src.GetList(context.Background(), "/core/configmaps", opts, nil); err != nil {
		t.Fatal(err)
	}
	if rec.last.Predicate.Limit != 0 || rec.last.Predicate.Continue != "" || !rec.last.Recursive {
		t.Errorf("cache fill list reached storage as %+v, want unpaged and recursive", rec.last)
	}
}

// listingStore answers the cache's fill with the given objects and its
// watch with w; its own count (the datastore's) is datastore.
type listingStore struct {
	storage.Interface
	items     []corev1.ConfigMap
	w         *watch.FakeWatcher
	datastore int64
}

func (l *listingStore) GetList(_ context.Context, _ string, _ storage.ListOptions, out runtime.Object) error {
	list := out.(*corev1.ConfigMapList)
	list.Items, list.ResourceVersion = l.items, "10"
	return nil
}

func (l *listingStore) Watch(context.Context, string, storage.ListOptions) (watch.Interface, error) {
	return l.w, nil
}

func (l *listingStore) Stats(context.Context) (storage.Stats, error) {
	return storage.Stats{ObjectCount: l.datastore}, nil
}

// The object count the server reports (apiserver_resource_objects, and the
// cost priority and fairness gives a list) is the watch cache's: what the
// cache was filled with, plus what its watch created, minus what it
// deleted; the datastore counts only until the first fill.
func TestCachedStoreCountsTheCache(t *testing.T) {
	ctx := context.Background()
	raw := &listingStore{datastore: 42}
	count := &objectCount{}
	src := cacheSource{Interface: raw, fed: &atomic.Uint64{}, count: count}
	cached := &cachedStore{Interface: raw, raw: raw, fed: src.fed, count: count}
	stats := func() int64 {
		t.Helper()
		s, err := cached.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.ObjectCount
	}
	if n := stats(); n != 42 {
		t.Errorf("before the cache is filled: %d objects, want the datastore's 42", n)
	}
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "11"}}
	}
	raw.items = []corev1.ConfigMap{*cm("a"), *cm("b"), *cm("c")}
	if err := src.GetList(ctx, "/core/configmaps", storage.ListOptions{Recursive: true}, &corev1.ConfigMapList{}); err != nil {
		t.Fatal(err)
	}
	if n := stats(); n != 3 {
		t.Errorf("after a fill of 3: %d objects", n)
	}
	// A list that is not the cache's fill (one key) changes nothing.
	if err := src.GetList(ctx, "/core/configmaps/x", storage.ListOptions{}, &corev1.ConfigMapList{}); err != nil {
		t.Fatal(err)
	}
	raw.w = watch.NewFake()
	w, err := src.Watch(ctx, "/core/configmaps", storage.ListOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		raw.w.Add(cm("d"))
		raw.w.Add(cm("e"))
		raw.w.Modify(cm("a"))
		raw.w.Delete(cm("b"))
		raw.w.Action(watch.Bookmark, cm(""))
		raw.w.Stop()
	}()
	for range w.ResultChan() {
	}
	if n := stats(); n != 4 {
		t.Errorf("after 2 creates, an update, a delete and a bookmark: %d objects, want 4", n)
	}
	// A relist (the cache's watch failed) starts the count again.
	raw.items = raw.items[:1]
	if err := src.GetList(ctx, "/core/configmaps", storage.ListOptions{Recursive: true}, &corev1.ConfigMapList{}); err != nil {
		t.Fatal(err)
	}
	if n := stats(); n != 1 {
		t.Errorf("after a relist of 1: %d objects", n)
	}
}
