package clusterstore

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/storage/sharedmaps"
)

// The watch cache holds one decoded copy of every object of every cluster,
// and an empty workspace's objects are nearly all alike: every object's
// annotations are the one kcp.io/cluster entry of its cluster, every
// namespace's labels are the one kubernetes.io/metadata.name entry of its
// name, every kube-root-ca.crt holds the same CA. Decoded, each of those is
// a map of its own (about 300 bytes for a one-entry map; 1.5 KiB with the
// CA). The cache's source (cacheSource) hands the cache objects whose
// small maps are shared by content instead (package sharedmaps).
//
// This relies on the contract the watch cache already has: its objects are
// shared by every reader and never changed in place (a read gets a shallow
// copy, an update starts from a deep copy). Only the cache's own objects are
// shared; objects read from the datastore for a request are not.

// shareMaps replaces the small maps of obj (labels, annotations, a config
// map's data) by shared maps of equal content.
func shareMaps(obj runtime.Object) {
	if _, ok := obj.(runtime.Unstructured); ok {
		// Its maps are map[string]interface{}: setting a shared
		// map[string]string would only copy it into a new one.
		return
	}
	if m, err := meta.Accessor(obj); err == nil {
		if l := m.GetLabels(); len(l) > 0 {
			m.SetLabels(sharedmaps.Of(l))
		}
		if a := m.GetAnnotations(); len(a) > 0 {
			m.SetAnnotations(sharedmaps.Of(a))
		}
	}
	if cm, ok := obj.(*api.ConfigMap); ok && len(cm.Data) > 0 {
		cm.Data = sharedmaps.Of(cm.Data)
	}
}

// sharedList shares the maps of every object of a list the cache fills
// itself from.
func sharedList(list runtime.Object) {
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		shareMaps(o)
		return nil
	})
}

// sharedWatch shares the maps of the objects of every event the cache
// applies (deletions are left alone: the cache drops their object), and
// notes the resourceVersion of every event, bookmarks included.
func sharedWatch(in watch.Interface, note func(rv string), delivered func(watch.EventType)) watch.Interface {
	w := &sharingWatch{in: in, note: note, delivered: delivered, out: make(chan watch.Event), stopped: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

// sharingWatch is watch.Filter that also ends when stopped while an event
// waits to be read (the cache's reflector stops a watch without draining
// it, which would leave watch.Filter's goroutine blocked for good).
type sharingWatch struct {
	in        watch.Interface
	note      func(rv string)
	delivered func(watch.EventType) // after the cache has received an event
	out       chan watch.Event
	stopped   chan struct{}
	done      chan struct{} // closed when loop has returned
	once      sync.Once
}

func (w *sharingWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *sharingWatch) Stop() {
	w.once.Do(func() {
		close(w.stopped)
		w.in.Stop()
	})
}

func (w *sharingWatch) loop() {
	defer close(w.done)
	defer close(w.out)
	for e := range w.in.ResultChan() {
		if (e.Type == watch.Added || e.Type == watch.Modified) && e.Object != nil {
			shareMaps(e.Object)
		}
		if e.Type != watch.Error && e.Object != nil {
			if m, err := meta.Accessor(e.Object); err == nil {
				w.note(m.GetResourceVersion())
			}
		}
		select {
		case w.out <- e:
			w.delivered(e.Type)
		case <-w.stopped:
			return
		}
	}
}

func (s cacheSource) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := s.Interface.Watch(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return sharedWatch(w, s.note, s.count.delivered), nil
}

// sharedAttrs gives the watch cache shared field sets: it keeps one per
// object (for field selectors), and most are alike across clusters
// (metadata.name=kube-root-ca.crt, metadata.namespace=default). Label sets
// are the object's own labels map, already shared by shareMaps.
func sharedAttrs(getAttrs storage.AttrFunc) storage.AttrFunc {
	return func(obj runtime.Object) (labels.Set, fields.Set, error) {
		l, f, err := getAttrs(obj)
		if err != nil {
			return l, f, err
		}
		return l, fields.Set(sharedmaps.Of(f)), nil
	}
}
