package worker

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/server/clusterinformer"
)

// Wildcard is the plumbing of a controller of one resource in every
// logical cluster: one wildcard informer (one watch for all clusters), a
// queue keyed by cluster/namespace/name, and clients per cluster for the
// writes.
type Wildcard struct {
	name     string
	queue    workqueue.TypedRateLimitingInterface[string]
	indexer  cache.Indexer
	informer cache.Controller
	// Clients are the loopback clients per logical cluster.
	Clients *clusterinformer.Clients
}

// NewWildcard watches gvr in all logical clusters; adds and updates are
// queued.
func NewWildcard(loopback *rest.Config, name string, gvr schema.GroupVersionResource) (*Wildcard, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	w := &Wildcard{name: name, queue: NewQueue[string](name), Clients: clients}
	res := wildcard.Resource(gvr)
	enqueue := func(obj interface{}) {
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			w.queue.Add(key)
		}
	}
	w.indexer, w.informer = clusterinformer.New(clusterinformer.ListWatch(res.List, res.Watch), &unstructured.Unstructured{}, nil,
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj interface{}) { enqueue(obj) }})
	return w, nil
}

// Run calls reconcile with a copy of each queued object that still exists
// until ctx ends.
func (w *Wildcard) Run(ctx context.Context, workers int, reconcile func(context.Context, *unstructured.Unstructured) (time.Duration, error)) {
	Run(ctx, w.name, w.queue, workers, []cache.Controller{w.informer}, func(ctx context.Context, key string) (time.Duration, error) {
		obj, exists, err := w.indexer.GetByKey(key)
		if err != nil || !exists {
			return 0, nil
		}
		return reconcile(ctx, obj.(*unstructured.Unstructured).DeepCopy())
	})
}
