// Package apibinding writes the status of APIBindings and APIExports in
// every logical cluster from what the shared index (server/boundapis)
// resolved: which resources a binding serves or why it serves none, the
// export's identity and whether its schemas are usable (see README.md).
package apibinding

import (
	"context"
	"encoding/json"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const name = "kcp-apibinding-status"

// key is a binding or an export.
type key struct {
	binding bool
	cluster logicalcluster.Name
	name    string
}

// Controller is the queue plumbing; the work is in reconcile.
type Controller struct {
	queue workqueue.TypedRateLimitingInterface[key]
	index *boundapis.Index
	r     *reconciler
}

// NewController follows the index's changes; it adds no watch of its own.
func NewController(loopback *rest.Config, index *boundapis.Index) (*Controller, error) {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[key](name), index: index}
	c.r = &reconciler{
		deleteObjects: func(ctx context.Context, cluster logicalcluster.Name, defs []*apiextensionsv1.CustomResourceDefinition) (int, error) {
			d, err := clients.Dynamic(cluster)
			if err != nil {
				return 0, err
			}
			n := 0
			for _, crd := range defs {
				gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: crd.Status.StoredVersions[0], Resource: crd.Spec.Names.Plural}
				list, err := d.Resource(gvr).List(ctx, metav1.ListOptions{})
				if err != nil {
					return 0, err
				}
				n += len(list.Items)
				for _, o := range list.Items {
					if o.GetDeletionTimestamp() != nil {
						continue
					}
					err := d.Resource(gvr).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
					if err != nil && !apierrors.IsNotFound(err) {
						return 0, err
					}
				}
			}
			return n, nil
		},
		removeFinalizer: func(ctx context.Context, cluster logicalcluster.Name, obj *unstructured.Unstructured) error {
			d, err := clients.Dynamic(cluster)
			if err != nil {
				return err
			}
			var keep []string
			for _, f := range obj.GetFinalizers() {
				if f != apis.BindingFinalizer {
					keep = append(keep, f)
				}
			}
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep, "resourceVersion": obj.GetResourceVersion()}})
			if err != nil {
				return err
			}
			_, err = d.Resource(apis.BindingsResource).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1PatchOptions)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		},
		bindings: index.Bindings,
		export:   index.Export,
		object:   index.Object,
		patchStatus: func(ctx context.Context, binding bool, cluster logicalcluster.Name, name string, patch []byte) error {
			d, err := clients.Dynamic(cluster)
			if err != nil {
				return err
			}
			gvr := apis.ExportsResource
			if binding {
				gvr = apis.BindingsResource
			}
			_, err = d.Resource(gvr).Patch(ctx, name, types.MergePatchType, patch, metav1PatchOptions, "status")
			return err
		},
	}
	index.OnChange(func(clusters []logicalcluster.Name) {
		for _, cl := range clusters {
			for _, b := range index.Bindings(cl) {
				c.queue.Add(key{binding: true, cluster: cl, name: b.Name})
			}
		}
	})
	index.OnExportChange(func(provider logicalcluster.Name, n string) {
		c.queue.Add(key{cluster: provider, name: n})
	})
	return c, nil
}

// Run processes the queue until ctx ends; it looks at everything once at
// start and every few minutes.
func (c *Controller) Run(ctx context.Context, workers int) {
	go func() {
		t := time.NewTicker(5 * time.Minute)
		defer t.Stop()
		for {
			c.enqueueAll()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	worker.Run(ctx, name, c.queue, workers, nil, func(ctx context.Context, k key) (time.Duration, error) {
		return c.r.reconcile(ctx, k)
	})
}

func (c *Controller) enqueueAll() {
	bindings, exports := c.index.Keys()
	for i, keys := range [][]string{bindings, exports} {
		for _, k := range keys {
			if cl, _, n, err := clusterinformer.SplitKey(k); err == nil {
				c.queue.Add(key{binding: i == 0, cluster: cl, name: n})
			}
		}
	}
}
