// Package clusterinformer watches one resource across all logical clusters
// (a single list/watch on /clusters/*) and keys its cache by cluster as well
// as namespace and name, so that equal names in two clusters never collide.
// It is what shared controllers use instead of one informer per cluster.
package clusterinformer

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Key is "<cluster>|<namespace>/<name>" ("<cluster>|<name>" when cluster-scoped).
func Key(cluster logicalcluster.Name, namespace, name string) string {
	if namespace == "" {
		return string(cluster) + "|" + name
	}
	return string(cluster) + "|" + namespace + "/" + name
}

// SplitKey is the inverse of Key.
func SplitKey(key string) (cluster logicalcluster.Name, namespace, name string, err error) {
	c, rest, ok := strings.Cut(key, "|")
	if !ok {
		return "", "", "", fmt.Errorf("key %q has no cluster", key)
	}
	ns, n, found := strings.Cut(rest, "/")
	if !found {
		return logicalcluster.Name(c), "", ns, nil
	}
	return logicalcluster.Name(c), ns, n, nil
}

// ClusterOf returns the cluster an object was read from (its annotation).
func ClusterOf(obj metav1Object) logicalcluster.Name {
	return logicalcluster.Name(obj.GetAnnotations()[logicalcluster.Annotation])
}

type metav1Object interface{ GetAnnotations() map[string]string }

// KeyFunc is the cache key function for objects read across clusters.
func KeyFunc(obj interface{}) (string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Key, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	c := ClusterOf(m)
	if c == "" {
		return "", fmt.Errorf("%s %q carries no %s annotation", obj, m.GetName(), logicalcluster.Annotation)
	}
	return Key(c, m.GetNamespace(), m.GetName()), nil
}

// dropManagedFields keeps shared caches small: with objects of every
// cluster in memory, managed fields would be most of their size, and no
// controller here reads them.
func dropManagedFields(obj interface{}) (interface{}, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// WildcardConfig returns a copy of a loopback config aimed at all clusters.
func WildcardConfig(cfg *rest.Config) *rest.Config {
	return ForCluster(cfg, logicalcluster.Wildcard)
}

// ForCluster returns a copy of cfg aimed at one logical cluster.
func ForCluster(cfg *rest.Config, cluster logicalcluster.Name) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = strings.TrimSuffix(c.Host, "/") + "/clusters/" + string(cluster)
	return c
}

// Index names for the indexers below.
const (
	ByCluster          = "cluster"
	ByClusterNamespace = "cluster-namespace"
)

// ClusterIndexers index objects by cluster and by cluster and namespace
// ("<cluster>|<namespace>").
var ClusterIndexers = cache.Indexers{
	ByCluster: func(obj interface{}) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return []string{string(ClusterOf(m))}, nil
	},
	ByClusterNamespace: func(obj interface{}) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return []string{string(ClusterOf(m)) + "|" + m.GetNamespace()}, nil
	},
}

// ListWatch adapts a typed, dynamic or metadata client's List and Watch of
// one resource (usually through WildcardConfig) to a ListerWatcher.
func ListWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) },
		WatchFuncWithContext: watchFn,
	}
}

// New returns an informer over lw whose cache uses KeyFunc and the given
// indexers and which calls handler (if any) for every change.
func New(lw cache.ListerWatcher, objType runtime.Object, indexers cache.Indexers, handler cache.ResourceEventHandler) (cache.Indexer, cache.Controller) {
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	if handler == nil {
		handler = cache.ResourceEventHandlerFuncs{}
	}
	indexer := cache.NewIndexer(KeyFunc, indexers)
	fifo := cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{
		KeyFunction:           KeyFunc,
		KnownObjects:          indexer,
		EmitDeltaTypeReplaced: true,
		Transformer:           dropManagedFields,
	})
	process := func(obj interface{}, isInInitialList bool) error {
		for _, d := range obj.(cache.Deltas) {
			switch d.Type {
			case cache.Deleted:
				if err := indexer.Delete(d.Object); err != nil {
					return err
				}
				handler.OnDelete(d.Object)
			default:
				old, exists, err := indexer.Get(d.Object)
				if err != nil {
					return err
				}
				if exists {
					if err := indexer.Update(d.Object); err != nil {
						return err
					}
					handler.OnUpdate(old, d.Object)
				} else {
					if err := indexer.Add(d.Object); err != nil {
						return err
					}
					handler.OnAdd(d.Object, isInInitialList)
				}
			}
		}
		return nil
	}
	ctrl := cache.New(&cache.Config{
		Queue:         fifo,
		ListerWatcher: listOnly{lw},
		ObjectType:    objType,
		Process:       process,
	})
	return indexer, ctrl
}

// listOnly keeps the reflector from streaming the initial state as watch
// events (WatchList): client-go collects those in a temporary store keyed
// by namespace/name alone, where objects of equal name in different
// clusters overwrite each other. A plain list is keyed by KeyFunc.
type listOnly struct{ cache.ListerWatcher }

// ListWithContext never pages: a shared informer reads one resource of
// every cluster, and the watch cache serves each page of a paged list by
// collecting everything from the page's start to the end of the resource
// (upstream's cacher), so paging through a million objects 500 at a time
// costs about a thousand times one whole list. Without the cache, kine
// counts the rest of the range for every page, which is just as quadratic.
// One unpaged list is linear in both.
func (l listOnly) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	o.Limit, o.Continue = 0, ""
	return cache.ToListerWatcherWithContext(l.ListerWatcher).ListWithContext(ctx, o)
}

func (l listOnly) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return cache.ToListerWatcherWithContext(l.ListerWatcher).WatchWithContext(ctx, o)
}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }
