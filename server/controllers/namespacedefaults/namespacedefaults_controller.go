// Package namespacedefaults gives every namespace of every logical cluster
// its default service account and kube-root-ca.crt config map (see README.md).
package namespacedefaults

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const (
	name = "kcp-namespace-defaults"
	// RootCAConfigMap is the config map every namespace gets.
	RootCAConfigMap = "kube-root-ca.crt"
	// DefaultServiceAccount is the service account every namespace gets.
	DefaultServiceAccount = "default"
)

// Controller is the informer and queue plumbing; the work is in reconciler.
type Controller struct {
	queue      workqueue.TypedRateLimitingInterface[string]
	informers  []cache.Controller
	namespaces *clusterinformer.Namespaces
	handler    cache.ResourceEventHandler
	r          *reconciler
	// served: the storage layer serves the defaults (storage/serveddefaults);
	// the controller writes only when one was deleted or changed.
	served bool
}

// servedGrace is how long after a namespace's event its served defaults
// are looked at.
const servedGrace = 10 * time.Second

// DefaultsServed says that the storage layer serves the defaults.
func (c *Controller) DefaultsServed() { c.served = true }

// NewController builds the controller on the server's shared namespace
// informer; caPEM is published as ca.crt.
func NewController(loopback *rest.Config, caPEM string, state func(logicalcluster.Name) (exists, terminating bool), namespaces *clusterinformer.Namespaces) (*Controller, error) {
	wildcard, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name), namespaces: namespaces}
	rc := wildcard.CoreV1().RESTClient()
	// Every event names a namespace to look at: the namespace itself, or the
	// namespace of a default object.
	nsKey := func(obj interface{}) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			return clusterinformer.Key(clusterinformer.ClusterOf(o), "", o.Name)
		case *corev1.ServiceAccount:
			return clusterinformer.Key(clusterinformer.ClusterOf(o), "", o.Namespace)
		case *corev1.ConfigMap:
			return clusterinformer.Key(clusterinformer.ClusterOf(o), "", o.Namespace)
		}
		return ""
	}
	now := func(obj interface{}) {
		if k := nsKey(obj); k != "" {
			c.queue.Add(k)
		}
	}
	// When the storage layer serves the defaults, a new namespace's
	// defaults appear at the namespace's own revision, but their events
	// reach the three informers one after the other: a look at the first
	// event would find the others missing and try to create them (refused,
	// but a request each). What needs a write (a default deleted or
	// changed) is an update or a delete, looked at at once.
	added := func(obj interface{}) {
		if !c.served {
			now(obj)
		} else if k := nsKey(obj); k != "" {
			c.queue.AddAfter(k, servedGrace)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: added, UpdateFunc: func(_, o interface{}) { now(o) }, DeleteFunc: now}
	c.handler = handler
	// The caches keep what the reconciler reads: that a default exists and,
	// for a config map, whether it holds exactly the CA. A config map that
	// does shares one data map (caData): one copy of the CA, not one per
	// namespace of every cluster.
	caData := map[string]string{"ca.crt": caPEM}
	trim := func(obj interface{}) (interface{}, error) {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			return &corev1.ServiceAccount{ObjectMeta: clusterinformer.TrimmedMeta(&o.ObjectMeta)}, nil
		case *corev1.ConfigMap:
			out := &corev1.ConfigMap{ObjectMeta: clusterinformer.TrimmedMeta(&o.ObjectMeta), Data: o.Data, BinaryData: o.BinaryData}
			if len(o.Data) == 1 && o.Data["ca.crt"] == caPEM {
				out.Data = caData
			}
			return out, nil
		}
		return obj, nil
	}
	run := func(resource string, selector fields.Selector, obj runtime.Object) cache.Indexer {
		lw := cache.NewListWatchFromClient(rc, resource, "", selector)
		indexer, ctrl := clusterinformer.NewTrimmed(lw, obj, nil, handler, trim)
		c.informers = append(c.informers, ctrl)
		return indexer
	}
	c.informers = append(c.informers, namespaces.Synced())
	sas := run("serviceaccounts", fields.OneTermEqualSelector("metadata.name", DefaultServiceAccount), &corev1.ServiceAccount{})
	cms := run("configmaps", fields.OneTermEqualSelector("metadata.name", RootCAConfigMap), &corev1.ConfigMap{})
	get := func(ix cache.Indexer, key string) interface{} {
		obj, ok, _ := ix.GetByKey(key)
		if !ok {
			return nil
		}
		return obj
	}
	c.r = &reconciler{
		caPEM: caPEM,
		state: state,
		getNamespace: func(cl logicalcluster.Name, ns string) *corev1.Namespace {
			o, _ := get(namespaces.Indexer(), clusterinformer.Key(cl, "", ns)).(*corev1.Namespace)
			return o
		},
		getServiceAccount: func(cl logicalcluster.Name, ns string) *corev1.ServiceAccount {
			o, _ := get(sas, clusterinformer.Key(cl, ns, DefaultServiceAccount)).(*corev1.ServiceAccount)
			return o
		},
		getConfigMap: func(cl logicalcluster.Name, ns string) *corev1.ConfigMap {
			o, _ := get(cms, clusterinformer.Key(cl, ns, RootCAConfigMap)).(*corev1.ConfigMap)
			return o
		},
		clientFor: clients.Core,
	}
	return c, nil
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.namespaces.AddEventHandlerUntil(ctx, c.handler)
	worker.Run(ctx, name, c.queue, workers, c.informers, func(ctx context.Context, key string) (time.Duration, error) {
		cl, _, ns, err := clusterinformer.SplitKey(key)
		if err != nil {
			return 0, nil
		}
		return 0, c.r.reconcile(ctx, cl, ns)
	})
}
