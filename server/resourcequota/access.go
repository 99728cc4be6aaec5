// Package resourcequota enforces ResourceQuotas in every logical cluster:
// an admission plugin that charges each create (and each update that
// changes usage) against the quotas of the object's own cluster and
// namespace, and one controller for all clusters that keeps each quota's
// status (hard, used) true.
//
// Both are upstream's machinery, made cluster-aware through its public
// extension points: the quota admission evaluator
// (k8s.io/apiserver/pkg/admission/plugin/resourcequota.NewQuotaEvaluator)
// and the usage calculation (k8s.io/apiserver/pkg/quota/v1.CalculateUsage)
// with the evaluators of k8s.io/kubernetes/pkg/quota/v1/evaluator/core
// take a namespace name, a QuotaAccessor and listers. Here that name is a
// key, "<cluster>|<namespace>" (neither part can hold a "|"), which the
// accessor and the listers below split again: the evaluator's per-namespace
// work queue becomes a queue per cluster and namespace, and every read and
// write goes to the right logical cluster.
package resourcequota

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/lru"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// key is how a cluster and namespace travel through upstream's quota code
// in place of a namespace name; it is also clusterinformer's
// ByClusterNamespace index value.
func key(cluster logicalcluster.Name, namespace string) string {
	return string(cluster) + "|" + namespace
}

func splitKey(k string) (logicalcluster.Name, string, error) {
	cluster, ns, ok := strings.Cut(k, "|")
	if !ok || cluster == "" {
		return "", "", fmt.Errorf("not a quota key: %q", k)
	}
	return logicalcluster.Name(cluster), ns, nil
}

// accessor is the QuotaAccessor of the admission evaluator: quotas from
// the shared informer, written through the loopback client of their
// cluster, with a look-aside cache of the quotas it wrote itself (the
// informer may not have them yet; back-to-back creates would otherwise
// conflict).
type accessor struct {
	indexer cache.Indexer
	clients *clusterinformer.Clients
	// charged is told the key (clusterinformer.Key) of every quota this
	// accessor charged.
	charged func(key string)

	mu      sync.Mutex
	written *lru.Cache
}

func newAccessor(indexer cache.Indexer, clients *clusterinformer.Clients, charged func(string)) *accessor {
	return &accessor{indexer: indexer, clients: clients, charged: charged, written: lru.New(4096)}
}

// GetQuotas returns the quotas of a "<cluster>|<namespace>" key, each
// with that key as its namespace (the evaluator hands it back to
// UpdateQuotaStatus and, on a retry, to GetQuotas).
func (a *accessor) GetQuotas(k string) ([]corev1.ResourceQuota, error) {
	objs, err := a.indexer.ByIndex(clusterinformer.ByClusterNamespace, k)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.ResourceQuota, 0, len(objs))
	for _, o := range objs {
		q := o.(*corev1.ResourceQuota)
		a.mu.Lock()
		if w, ok := a.written.Get(k + "/" + q.Name); ok {
			if newer(w.(*corev1.ResourceQuota), q) {
				q = w.(*corev1.ResourceQuota)
			} else {
				a.written.Remove(k + "/" + q.Name)
			}
		}
		a.mu.Unlock()
		c := q.DeepCopy()
		c.Namespace = k
		out = append(out, *c)
	}
	return out, nil
}

// UpdateQuotaStatus writes a quota's status with its resourceVersion (a
// conflict makes the evaluator read and try again).
func (a *accessor) UpdateQuotaStatus(q *corev1.ResourceQuota) error {
	k := q.Namespace
	cluster, ns, err := splitKey(k)
	if err != nil {
		return err
	}
	core, err := a.clients.Core(cluster)
	if err != nil {
		return err
	}
	c := q.DeepCopy()
	c.Namespace = ns
	updated, err := core.ResourceQuotas(ns).UpdateStatus(context.TODO(), c, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.written.Add(k+"/"+q.Name, updated)
	a.mu.Unlock()
	a.charged(clusterinformer.Key(cluster, ns, q.Name))
	return nil
}

// newer: a's resourceVersion is after b's (kine's are integers).
func newer(a, b *corev1.ResourceQuota) bool {
	x, err1 := strconv.ParseUint(a.ResourceVersion, 10, 64)
	y, err2 := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

// listers is the controller's quota.ListerForResourceFunc: a lister of
// one resource whose ByNamespace takes a "<cluster>|<namespace>" key and
// lists through the loopback client of that cluster. Pods, services and
// persistent volume claims come typed (their evaluators read them);
// everything else as metadata, which is all an object count needs.
type listers struct {
	clients *clusterinformer.Clients
	// consistent lists see every write stored before them (the default
	// resourceVersion); others read the watch cache as it is.
	consistent bool
}

func (l *listers) forResource(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
	return genericLister{l: l, gvr: gvr}, nil
}

type genericLister struct {
	l   *listers
	gvr schema.GroupVersionResource
}

func (g genericLister) List(labels.Selector) ([]runtime.Object, error) {
	return nil, fmt.Errorf("quota usage is listed per cluster and namespace")
}

func (g genericLister) Get(string) (runtime.Object, error) {
	return nil, fmt.Errorf("quota usage is listed per cluster and namespace")
}

func (g genericLister) ByNamespace(k string) cache.GenericNamespaceLister {
	return namespaceLister{genericLister: g, key: k}
}

type namespaceLister struct {
	genericLister
	key string
}

func (n namespaceLister) Get(string) (runtime.Object, error) {
	return nil, fmt.Errorf("quota usage is listed, not read one by one")
}

func (n namespaceLister) List(sel labels.Selector) ([]runtime.Object, error) {
	cluster, ns, err := splitKey(n.key)
	if err != nil {
		return nil, err
	}
	ctx := context.TODO()
	// From the watch cache as it is (resourceVersion "0"), as upstream's
	// controller counts from informers: a consistent list would wait for
	// the cache to catch up with the latest write of any resource (up to
	// 100 ms for a progress notification), and the status writes of the
	// quotas being counted are such writes. Every recount that must see a
	// change (after a deletion or a charge) runs a second or more later.
	opts := metav1.ListOptions{LabelSelector: sel.String(), ResourceVersion: "0"}
	if n.l.consistent {
		opts.ResourceVersion = ""
	}
	if n.gvr.Group == "" && n.gvr.Version == "v1" {
		core, err := n.l.clients.Core(cluster)
		if err != nil {
			return nil, err
		}
		switch n.gvr.Resource {
		case "pods":
			list, err := core.Pods(ns).List(ctx, opts)
			if err != nil {
				return nil, notServed(err)
			}
			return objects(list.Items), nil
		case "services":
			list, err := core.Services(ns).List(ctx, opts)
			if err != nil {
				return nil, notServed(err)
			}
			return objects(list.Items), nil
		case "persistentvolumeclaims":
			list, err := core.PersistentVolumeClaims(ns).List(ctx, opts)
			if err != nil {
				return nil, notServed(err)
			}
			return objects(list.Items), nil
		}
	}
	mc, err := n.l.clients.Metadata(cluster)
	if err != nil {
		return nil, err
	}
	list, err := mc.Resource(n.gvr).Namespace(ns).List(ctx, opts)
	if err != nil {
		return nil, notServed(err)
	}
	return objects(list.Items), nil
}

// objects are pointers to the items of a list, as runtime.Objects.
func objects[T any, PT interface {
	*T
	runtime.Object
}](items []T) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// notServed: a resource the cluster does not serve has no objects.
func notServed(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
