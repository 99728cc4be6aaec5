// Package crdlifecycle runs the lifecycle of every logical cluster's
// CustomResourceDefinitions (see README.md): accepted names and conflicts
// within one cluster, Established, NonStructuralSchema, the API-approval
// condition, and deletion that removes that cluster's custom resources only.
package crdlifecycle

import (
	"context"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const name = "kcp-crd-lifecycle"

// Controller is the queue plumbing; the work is in reconciler. It reads
// CRDs from the serving layer's shared informer instead of watching again.
type Controller struct {
	queue   workqueue.TypedRateLimitingInterface[string]
	serving *crdserving.Server
	r       *reconciler
}

// NewController builds the controller over the shared CRD cache.
func NewController(loopback *rest.Config, serving *crdserving.Server) (*Controller, error) {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name), serving: serving}
	c.r = &reconciler{
		get:      serving.CRD,
		list:     serving.CRDs,
		reserved: serving.Reserved,
		crdClient: func(cl logicalcluster.Name) (apiextensionsclient.Interface, error) {
			return apiextensionsclient.NewForConfigAndClient(clusterinformer.ForCluster(loopback, cl), clients.HTTP())
		},
		metadataClient: func(cl logicalcluster.Name) (metadata.Interface, error) {
			return clients.Metadata(cl)
		},
		enqueue: func(cl logicalcluster.Name, crd string) { c.queue.Add(clusterinformer.Key(cl, "", crd)) },
	}
	return c, nil
}

func (c *Controller) enqueue(obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		cl := clusterinformer.ClusterOf(crd)
		c.queue.Add(clusterinformer.Key(cl, "", crd.Name))
		// A change of one CRD's names may free names another waits for.
		for _, other := range c.serving.LocalCRDs(cl) {
			if other.Spec.Group == crd.Spec.Group && other.Name != crd.Name {
				c.queue.Add(clusterinformer.Key(cl, "", other.Name))
			}
		}
	}
}

// Run waits for the shared CRD cache and processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return c.serving.Synced(), nil
	}); err != nil {
		return
	}
	c.serving.Listen(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	// Everything present before we listened.
	for _, key := range c.serving.AllKeys() {
		c.queue.Add(key)
	}
	worker.Run(ctx, name, c.queue, workers, nil, func(ctx context.Context, key string) (time.Duration, error) {
		cl, _, n, err := clusterinformer.SplitKey(key)
		if err != nil || cl == crdserving.SystemCluster {
			return 0, nil
		}
		return c.r.reconcile(ctx, cl, n)
	})
}
