// Package clusterinformer is the server's name for the cluster-aware
// informer of client/clusterinformer (one list/watch on /clusters/*, a cache
// keyed by cluster, namespace and name), plus Clients, which builds the
// server's per-cluster clients over its loopback. The informer has one
// implementation, in client/, which controller authors outside kcp use too.
package clusterinformer

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/storage/keys"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/sharedmaps"
)

// Index names of ClusterIndexers.
const (
	ByCluster          = clusterinformer.ByCluster
	ByClusterNamespace = clusterinformer.ByClusterNamespace
)

// ClusterIndexers index objects by cluster and by cluster and namespace
// ("<cluster>|<namespace>").
var ClusterIndexers = clusterinformer.ClusterIndexers

// Key is "<cluster>|<namespace>/<name>" ("<cluster>|<name>" when cluster-scoped).
func Key(cluster logicalcluster.Name, namespace, name string) string {
	return clusterinformer.Key(cluster, namespace, name)
}

// SplitKey is the inverse of Key.
func SplitKey(key string) (cluster logicalcluster.Name, namespace, name string, err error) {
	return clusterinformer.SplitKey(key)
}

// ClusterOf returns the cluster an object was read from (its annotation).
func ClusterOf(obj interface{ GetAnnotations() map[string]string }) logicalcluster.Name {
	return clusterinformer.ClusterOf(obj)
}

// KeyFunc is the cache key function for objects read across clusters.
func KeyFunc(obj interface{}) (string, error) { return clusterinformer.KeyFunc(obj) }

// WildcardConfig returns a copy of a loopback config aimed at all
// clusters, whose reads wait for a watch cache that is still filling
// (waitForCaches).
func WildcardConfig(cfg *rest.Config) *rest.Config {
	return waitingForCaches(clusterinformer.WildcardConfig(cfg))
}

// ForCluster returns a copy of cfg aimed at one logical cluster, whose
// reads wait for a watch cache that is still filling (waitForCaches).
func ForCluster(cfg *rest.Config, cluster logicalcluster.Name) *rest.Config {
	return waitingForCaches(clusterinformer.ForCluster(cfg, cluster))
}

// ListWatch adapts a typed, dynamic or metadata client's List and Watch of
// one resource (usually through WildcardConfig) to a ListerWatcher.
func ListWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return clusterinformer.ListWatch(list, watchFn)
}

// New returns an informer over lw whose cache uses KeyFunc and the given
// indexers and which calls handler (if any) for every change.
func New(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler) (cache.Indexer, cache.Controller) {
	return clusterinformer.NewController(lw, objType, indexers, handler)
}

// NewTrimmed is New whose cache keeps trim(object) (see
// clusterinformer.NewTrimmedController).
func NewTrimmed(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler, trim cache.TransformFunc) (cache.Indexer, cache.Controller) {
	return clusterinformer.NewTrimmedController(lw, objType, indexers, handler, trim)
}

// NewKeeping is NewTrimmed whose cache keeps only the objects keep is
// true for (see clusterinformer.NewKeepingController).
func NewKeeping(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler, trim cache.TransformFunc, keep func(obj interface{}) bool) (cache.Indexer, cache.Controller) {
	return clusterinformer.NewKeepingController(lw, objType, indexers, handler, trim, keep)
}

// RangeFunc reads every stored object below a key prefix as of one revision
// of the datastore, which it returns (embeddedkine.Kine.Range). The
// server's caches of its own resources list with it where a list through
// the API server would decode, complete and encode every object for the
// cache to decode it again (custom resources have no watch cache).
type RangeFunc func(ctx context.Context, prefix string, fn func(key string, value []byte, revision int64) error) (int64, error)

// ListStored lists the rows rangeFn reads below prefix as an
// UnstructuredList of listKind (apiVersion as given), as the API server
// would list them for the fields a cache reads: object builds each item
// from its row (only what the cache needs, or the whole object); ListStored
// sets the item's resourceVersion (the row's revision) and its cluster
// annotation (from the key, as the API server does), and the list's
// resourceVersion: the revision it was read at, which a watch then starts
// from (WatchStored).
func ListStored(ctx context.Context, rangeFn RangeFunc, prefix, apiVersion, listKind string,
	object func(key string, value []byte) (*unstructured.Unstructured, error)) (*unstructured.UnstructuredList, error) {
	out := &unstructured.UnstructuredList{Object: map[string]interface{}{"apiVersion": apiVersion, "kind": listKind}}
	rev, err := rangeFn(ctx, prefix, func(key string, value []byte, revision int64) error {
		u, err := storedObject(object, key, value, revision)
		if err != nil {
			return err
		}
		out.Items = append(out.Items, *u)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.SetResourceVersion(strconv.FormatInt(rev, 10))
	return out, nil
}

// storedObject is object's item of a row at revision, with that
// resourceVersion and the cluster annotation of its key.
func storedObject(object func(key string, value []byte) (*unstructured.Unstructured, error), key string, value []byte, revision int64) (*unstructured.Unstructured, error) {
	u, err := object(key, value)
	if err != nil {
		return nil, err
	}
	u.SetResourceVersion(strconv.FormatInt(revision, 10))
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[logicalcluster.Annotation] = keys.ClusterOf(key)
	u.SetAnnotations(annotations)
	return u, nil
}

// WatchFunc calls fn with every change below a key prefix after a
// revision of the datastore, in order, until ctx ends or the watch ends
// (embeddedkine.Kine.Watch): nil when it ended without a reason (watch
// again from the last revision seen), an error for which
// apierrors.IsResourceExpired holds when the revision is too old.
type WatchFunc func(ctx context.Context, prefix string, revision int64, fn func(t watch.EventType, key string, value []byte, revision int64) error) error

// WatchStored continues a ListStored list: a watch of the rows below
// prefix from o.ResourceVersion (the list's, or the last one a watch
// delivered) whose events carry object's items as ListStored builds them,
// as the API server's watch would deliver them to a cache that reads
// those fields. A deletion's item is built from the value the row had,
// with the deletion's resourceVersion, as the API server does. The watch
// ends as the API server's does: closed when the datastore's watch ends
// without a reason (the informer watches again), and after an error event
// when it fails (410 Expired when the resourceVersion is too old, which
// makes an informer list again; 500 otherwise).
func WatchStored(ctx context.Context, watchFn WatchFunc, prefix string, o metav1.ListOptions,
	object func(key string, value []byte) (*unstructured.Unstructured, error)) (watch.Interface, error) {
	revision, err := strconv.ParseInt(o.ResourceVersion, 10, 64)
	if err != nil || revision <= 0 {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("a watch of stored objects starts at a list's resourceVersion, not %q", o.ResourceVersion))
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &storedWatch{result: make(chan watch.Event), cancel: cancel}
	go func() {
		defer close(w.result)
		err := watchFn(ctx, prefix, revision, func(t watch.EventType, key string, value []byte, revision int64) error {
			u, err := storedObject(object, key, value, revision)
			if err != nil {
				return err
			}
			select {
			case w.result <- watch.Event{Type: t, Object: u}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err == nil || ctx.Err() != nil {
			return
		}
		status := apierrors.NewInternalError(err).Status()
		var s apierrors.APIStatus
		if errors.As(err, &s) {
			status = s.Status()
		}
		select {
		case w.result <- watch.Event{Type: watch.Error, Object: &status}:
		case <-ctx.Done():
		}
	}()
	return w, nil
}

// storedWatch is WatchStored's watch.Interface.
type storedWatch struct {
	result chan watch.Event
	cancel context.CancelFunc
}

func (w *storedWatch) ResultChan() <-chan watch.Event { return w.result }
func (w *storedWatch) Stop()                          { w.cancel() }

// Consumer is one cache of a shared informer (see clusterinformer.Consumer).
type Consumer = clusterinformer.Consumer

// NewShared feeds several caches from one list and watch (see
// clusterinformer.NewSharedController).
func NewShared(lw cache.ListerWatcher, objType runtime.Object, consumers ...Consumer) ([]cache.Indexer, cache.Controller) {
	return clusterinformer.NewSharedController(lw, objType, consumers...)
}

// ClustersOf returns the distinct clusters of objects from a cache, in the
// order first seen.
func ClustersOf(objs []interface{}) []logicalcluster.Name {
	seen := map[logicalcluster.Name]bool{}
	var out []logicalcluster.Name
	for _, o := range objs {
		m, ok := o.(interface{ GetAnnotations() map[string]string })
		if !ok {
			continue
		}
		if c := ClusterOf(m); !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// TrimmedMeta is the identity of an object for a trimmed cache: name,
// namespace, UID, resourceVersion and its cluster, whose annotation map is
// shared by all objects of the cluster (package sharedmaps). Labels, other
// annotations, timestamps and managed fields are left out.
func TrimmedMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
	if cl, ok := m.Annotations[logicalcluster.Annotation]; ok {
		out.Annotations = sharedmaps.Of(map[string]string{logicalcluster.Annotation: cl})
	}
	return out
}

// TrimmedMetaOf is TrimmedMeta of an object read through its accessors (an
// object of the API server's storage, which its watch cache may hand
// wrapped for its serialization cache). It only reads the object.
func TrimmedMetaOf(m metav1.Object) metav1.ObjectMeta {
	return TrimmedMeta(&metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
		ResourceVersion: m.GetResourceVersion(), Annotations: m.GetAnnotations()})
}
