package clusterstore

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/sharedmaps"
)

func same(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestSharedMaps(t *testing.T) {
	ca := strings.Repeat("-----CERT-----", 80)
	cm := func(cluster, ns string) *api.ConfigMap {
		return &api.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt",
				Annotations: map[string]string{logicalcluster.Annotation: cluster}},
			Data: map[string]string{"ca.crt": strings.Clone(ca)},
		}
	}
	// A content seen once stays the object's own (the table keeps only its
	// hash); from the second object on, it is shared.
	a1, a, b, c := cm("root:a", "kube-public"), cm("root:a", "default"), cm("root:a", "kube-system"), cm("root:b", "default")
	for _, o := range []*api.ConfigMap{a1, a, b, c} {
		shareMaps(o)
	}
	if !same(a.Annotations, b.Annotations) {
		t.Error("objects of one cluster do not share their annotations")
	}
	if same(a.Annotations, c.Annotations) || c.Annotations[logicalcluster.Annotation] != "root:b" {
		t.Errorf("objects of two clusters share annotations: %v", c.Annotations)
	}
	if !same(a.Data, b.Data) || !same(a.Data, c.Data) || a.Data["ca.crt"] != ca {
		t.Error("equal config map data is not shared")
	}
	u := strconv.FormatInt(time.Now().UnixNano(), 36) // a content no earlier run saw
	once := map[string]string{"unique": u}
	if got := sharedmaps.Of(once); !same(got, once) {
		t.Error("a first content was replaced")
	}
	twice := map[string]string{"unique": u}
	if got := sharedmaps.Of(twice); !same(got, twice) {
		t.Error("the second map of a content is not the one kept")
	}
	if got := sharedmaps.Of(map[string]string{"unique": u}); !same(got, twice) {
		t.Error("a third map of a content is not shared")
	}

	// Large maps and many-entry maps stay the object's own.
	big := map[string]string{"k": strings.Repeat("x", sharedmaps.MaxBytes)}
	if got := sharedmaps.Of(big); !same(got, big) {
		t.Error("a map over the size bound was replaced")
	}
	big2 := map[string]string{"k": strings.Repeat("x", sharedmaps.MaxBytes)}
	if same(sharedmaps.Of(big2), big) {
		t.Error("a map over the size bound was shared")
	}
	// Maps whose entries differ only in how they split keys and values are
	// not confused.
	x := sharedmaps.Of(map[string]string{"a": "b", "c": ""})
	y := sharedmaps.Of(map[string]string{"a": "bc"})
	if same(x, y) || len(y) != 1 || y["a"] != "bc" {
		t.Errorf("different maps shared: %v %v", x, y)
	}

	// The watch the cache fills from shares maps of added and modified
	// objects, and leaves the event order alone.
	fake := watch.NewFake()
	w := sharedWatch(fake, func(string) {}, func(watch.EventType) {})
	d := cm("root:a", "team")
	go func() {
		fake.Add(d)
		fake.Stop()
	}()
	var got []watch.EventType
	for e := range w.ResultChan() {
		got = append(got, e.Type)
	}
	if len(got) != 1 || got[0] != watch.Added || !same(d.Annotations, a.Annotations) || !same(d.Data, a.Data) {
		t.Errorf("watch: events %v, annotations shared %v", got, same(d.Annotations, a.Annotations))
	}
}

// TestSharedWatchStops: a watch stopped while an event waits to be read,
// and never read again (as the cache's reflector does), ends: its
// goroutine does not stay blocked on the send.
func TestSharedWatchStops(t *testing.T) {
	fake := watch.NewFakeWithChanSize(1, false)
	w := sharedWatch(fake, func(string) {}, func(watch.EventType) {}).(*sharingWatch)
	fake.Add(&api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pending"}})
	w.Stop()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch's goroutine is still blocked 10 s after Stop")
	}
	if _, ok := <-w.ResultChan(); ok {
		t.Error("the watch delivered an event after Stop")
	}
}
