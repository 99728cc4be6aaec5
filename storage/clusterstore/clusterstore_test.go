package clusterstore

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/watchlist"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/serveddefaults"
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
	last  storage.ListOptions
	calls int
}

func (r *recordingStore) GetList(_ context.Context, _ string, opts storage.ListOptions, _ runtime.Object) error {
	r.last = opts
	r.calls++
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

// The in-process fill (ListObjects) decodes stored values with the
// resource's codec and converts served objects, keeping the order, giving
// each object its revision and the list the revision read at; one value it cannot decode fails the fill and
// names its key. Other lists (a resourceVersion to read at, a range
// ListObjects does not take) go to the store below.
func TestCacheSourceFillsInProcess(t *testing.T) {
	const n = 10000
	items := func() []serveddefaults.Item {
		out := make([]serveddefaults.Item, n)
		for i := range out {
			name := fmt.Sprintf("cm-%05d", i)
			if i%2 == 0 {
				out[i] = serveddefaults.Item{Key: "/registry/core/configmaps/root/ns/" + name, Revision: int64(100 + i),
					Value: []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"` + name + `","namespace":"ns"},"data":{"stored":"yes"}}`)}
			} else {
				out[i] = serveddefaults.Item{Key: "/registry/core/configmaps/root/ns/" + name, Revision: int64(100 + i),
					Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string]string{"served": "yes"}}}
			}
		}
		return out
	}
	var give []serveddefaults.Item
	ListObjects = func(_ context.Context, prefix string) (int64, []serveddefaults.Item, bool, error) {
		if prefix != "/registry/core/configmaps/" {
			return 0, nil, false, nil
		}
		return 99999, give, true, nil
	}
	ConvertObject = func(in, out runtime.Object) error {
		*out.(*corev1.ConfigMap) = *in.(*corev1.ConfigMap)
		return nil
	}
	defer func() { ListObjects, ConvertObject = nil, nil }()
	rec := &recordingStore{}
	src := cacheSource{Interface: rec, fed: &atomic.Uint64{}, count: &objectCount{}, prefix: "/registry/core/configmaps/",
		codec: clientgoscheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion)}
	ctx := context.Background()
	opts := storage.ListOptions{Recursive: true, ResourceVersion: "0", Predicate: storage.Everything}

	give = items()
	var list corev1.ConfigMapList
	if err := src.GetList(ctx, "/core/configmaps", opts, &list); err != nil {
		t.Fatal(err)
	}
	if rec.calls != 0 {
		t.Error("the fill also read the store below")
	}
	if list.ResourceVersion != "99999" || len(list.Items) != n {
		t.Fatalf("list at %q with %d items, want 99999 and %d", list.ResourceVersion, len(list.Items), n)
	}
	for i, cm := range list.Items {
		want := "stored"
		if i%2 == 1 {
			want = "served"
		}
		if cm.Name != fmt.Sprintf("cm-%05d", i) || cm.ResourceVersion != fmt.Sprint(100+i) || cm.Data[want] != "yes" {
			t.Fatalf("item %d: %s at %s with %v", i, cm.Name, cm.ResourceVersion, cm.Data)
		}
	}

	give = items()
	give[n-4].Value = []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":`)
	if err := src.GetList(ctx, "/core/configmaps", opts, &corev1.ConfigMapList{}); err == nil || !strings.Contains(err.Error(), "cm-09996") {
		t.Errorf("a value that does not decode: %v", err)
	}

	for _, o := range []storage.ListOptions{{Recursive: true, ResourceVersion: "42", Predicate: storage.Everything}} {
		before := rec.calls
		if err := src.GetList(ctx, "/core/configmaps", o, &corev1.ConfigMapList{}); err != nil {
			t.Fatal(err)
		}
		if rec.calls != before+1 {
			t.Errorf("a list at resourceVersion %s did not go to the store below", o.ResourceVersion)
		}
	}
	other := src
	other.prefix = "/registry/core/secrets/"
	before := rec.calls
	if err := other.GetList(ctx, "/core/secrets", opts, &corev1.SecretList{}); err != nil {
		t.Fatal(err)
	}
	if rec.calls != before+1 {
		t.Error("a range ListObjects does not take did not go to the store below")
	}
}

// An APIExport's view (datastoreUntilReady): a watch from before the
// revision the cache filled itself from goes to the datastore, which still
// has those events, instead of the cache, which would answer 410 Gone; other
// stores keep upstream's behaviour.
func TestWatchBeforeFillReadsTheDatastore(t *testing.T) {
	filled := &atomic.Uint64{}
	filled.Store(100)
	view := &cachedStore{filled: filled, datastoreUntilReady: true, ready: func() bool { return true }}
	builtin := &cachedStore{filled: filled, ready: func() bool { return true }}
	for rv, want := range map[string]bool{"": false, "0": false, "99": true, "1": true, "100": false, "101": false, "x": false} {
		if got := view.beforeFill(rv); got != want {
			t.Errorf("an export view's watch from %q reads the datastore: %v, want %v", rv, got, want)
		}
		if builtin.beforeFill(rv) {
			t.Errorf("a built-in resource's watch from %q reads the datastore", rv)
		}
	}
	filling := &cachedStore{filled: filled, datastoreUntilReady: true, ready: func() bool { return false }}
	if !filling.filling() || (&cachedStore{filled: filled, ready: func() bool { return false }}).filling() {
		t.Error("only an export view's store reads the datastore while its cache fills")
	}
}
