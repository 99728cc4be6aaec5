package clusterinformer

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Lister reads an Informer's cache: List spans every cluster, Cluster
// narrows to one. Returned objects are the cache's own: read-only.
type Lister[T runtime.Object] struct {
	indexer  cache.Indexer
	resource schema.GroupResource
}

// NewLister reads an indexer built by NewController or an Informer (keyed
// by KeyFunc, with ClusterIndexers).
func NewLister[T runtime.Object](indexer cache.Indexer, resource schema.GroupResource) Lister[T] {
	return Lister[T]{indexer: indexer, resource: resource}
}

// List returns the objects of every cluster that match selector.
func (l Lister[T]) List(selector labels.Selector) ([]T, error) {
	return filter[T](l.indexer.List(), selector)
}

// Cluster returns the lister of one logical cluster.
func (l Lister[T]) Cluster(cluster logicalcluster.Name) ClusterLister[T] {
	return ClusterLister[T]{l: l, cluster: cluster}
}

// ClusterLister reads the objects of one logical cluster.
type ClusterLister[T runtime.Object] struct {
	l       Lister[T]
	cluster logicalcluster.Name
}

// List returns the cluster's objects (of all namespaces) that match selector.
func (c ClusterLister[T]) List(selector labels.Selector) ([]T, error) {
	objs, err := c.l.indexer.ByIndex(ByCluster, string(c.cluster))
	if err != nil {
		return nil, err
	}
	return filter[T](objs, selector)
}

// Get returns a cluster-scoped object, or a NotFound error.
func (c ClusterLister[T]) Get(name string) (T, error) {
	return c.l.get(Key(c.cluster, "", name), name)
}

// Namespace returns the lister of one namespace of the cluster.
func (c ClusterLister[T]) Namespace(namespace string) NamespaceLister[T] {
	return NamespaceLister[T]{l: c.l, cluster: c.cluster, namespace: namespace}
}

// NamespaceLister reads the objects of one namespace of one cluster.
type NamespaceLister[T runtime.Object] struct {
	l         Lister[T]
	cluster   logicalcluster.Name
	namespace string
}

// List returns the namespace's objects that match selector.
func (n NamespaceLister[T]) List(selector labels.Selector) ([]T, error) {
	objs, err := ByNamespace(n.l.indexer, n.cluster, n.namespace)
	if err != nil {
		return nil, err
	}
	return filter[T](objs, selector)
}

// Get returns the namespaced object, or a NotFound error.
func (n NamespaceLister[T]) Get(name string) (T, error) {
	return n.l.get(Key(n.cluster, n.namespace, name), name)
}

func (l Lister[T]) get(key, name string) (T, error) {
	var zero T
	obj, exists, err := l.indexer.GetByKey(key)
	if err != nil {
		return zero, err
	}
	if !exists {
		return zero, apierrors.NewNotFound(l.resource, name)
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("cache holds %T for %q, not %T", obj, key, zero)
	}
	return t, nil
}

func filter[T runtime.Object](objs []interface{}, selector labels.Selector) ([]T, error) {
	if selector == nil {
		selector = labels.Everything()
	}
	out := make([]T, 0, len(objs))
	for _, obj := range objs {
		t, ok := obj.(T)
		if !ok {
			var zero T
			return nil, fmt.Errorf("cache holds %T, not %T", obj, zero)
		}
		if !selector.Empty() {
			m, err := meta.Accessor(obj)
			if err != nil {
				return nil, err
			}
			if !selector.Matches(labels.Set(m.GetLabels())) {
				continue
			}
		}
		out = append(out, t)
	}
	return out, nil
}
