package clusterstore

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
