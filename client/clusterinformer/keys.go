// Package clusterinformer watches one resource across all logical clusters
// with a single list/watch on /clusters/* and keys its cache by cluster as
// well as namespace and name, so that equal names in two clusters never
// collide. It is the supported way for controllers (kcp's own and anyone
// else's) to read every workspace at once; see docs/controllers.md.
package clusterinformer

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Key is "<cluster>|<namespace>/<name>" ("<cluster>|<name>" when cluster-scoped).
// '|' never occurs in a cluster name, a namespace or a name, so the key
// splits back unambiguously.
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

// ClusterOf returns the cluster an object was read from: the kcp.io/cluster
// annotation the server writes on every object and clients cannot set.
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
		return "", fmt.Errorf("%T %q carries no %s annotation (was it read through /clusters/*?)", obj, m.GetName(), logicalcluster.Annotation)
	}
	return Key(c, m.GetNamespace(), m.GetName()), nil
}

// WildcardConfig returns a copy of cfg aimed at all clusters (/clusters/*),
// for list and watch.
func WildcardConfig(cfg *rest.Config) *rest.Config {
	return ForCluster(cfg, logicalcluster.Wildcard)
}

// ForCluster returns a copy of cfg aimed at one logical cluster. cfg may
// point at the server itself or already at a cluster (a kubeconfig's
// https://host/clusters/root): a trailing /clusters/<name> is replaced.
func ForCluster(cfg *rest.Config, cluster logicalcluster.Name) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = ServerHost(c.Host) + "/clusters/" + string(cluster)
	return c
}

// ServerHost returns host without a trailing "/clusters/<name>" (and
// without a trailing slash): the address of the server itself.
func ServerHost(host string) string {
	host = strings.TrimSuffix(host, "/")
	if i := strings.LastIndex(host, "/clusters/"); i >= 0 && !strings.Contains(host[i+len("/clusters/"):], "/") {
		host = host[:i]
	}
	return host
}

// Index names of ClusterIndexers.
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
	// Cluster-scoped objects are not in this index: for them it would be
	// a copy of ByCluster (a set per cluster, about 300 bytes each with
	// 100,000 clusters). ByNamespace answers for them from ByCluster.
	ByClusterNamespace: func(obj interface{}) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		if m.GetNamespace() == "" {
			return nil, nil
		}
		return []string{string(ClusterOf(m)) + "|" + m.GetNamespace()}, nil
	},
}

// ByNamespace returns the objects of one namespace of one cluster from an
// indexer with ClusterIndexers; namespace "" returns its cluster-scoped
// objects.
func ByNamespace(indexer cache.Indexer, cluster logicalcluster.Name, namespace string) ([]interface{}, error) {
	if namespace != "" {
		return indexer.ByIndex(ByClusterNamespace, string(cluster)+"|"+namespace)
	}
	objs, err := indexer.ByIndex(ByCluster, string(cluster))
	if err != nil {
		return nil, err
	}
	out := objs[:0:0]
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil && m.GetNamespace() == "" {
			out = append(out, o)
		}
	}
	return out, nil
}
