package sharestatus

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/localwatch"
)

const name = "kcp-share-status"

// Controller writes the combined status of Deployments that several
// SyncTargets run.
type Controller struct {
	queue       workqueue.TypedRateLimitingInterface[string]
	deployments cache.Indexer
	informer    cache.Controller
	clients     *clusterinformer.Clients
}

// NewController watches Deployments of all logical clusters.
func NewController(loopback *rest.Config, local *localwatch.Storages) (*Controller, error) {
	wild, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name), clients: clients}
	enqueue := func(obj interface{}) {
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	lw := local.FromClient(wild.AppsV1().RESTClient(), appsv1.SchemeGroupVersion, "deployments", fields.Everything())
	c.deployments, c.informer = clusterinformer.New(lw, &appsv1.Deployment{}, clusterinformer.ClusterIndexers,
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o interface{}) { enqueue(o) }})
	return c, nil
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{c.informer}, func(ctx context.Context, key string) (time.Duration, error) {
		return 0, c.sync(ctx, key)
	})
}

func (c *Controller) sync(ctx context.Context, key string) error {
	obj, ok, _ := c.deployments.GetByKey(key)
	if !ok {
		return nil
	}
	d := obj.(*appsv1.Deployment)
	want, ok := Aggregate(d)
	if !ok || sameStatus(d.Status, want) {
		return nil
	}
	now := metav1.Now()
	for i := range want.Conditions {
		if want.Conditions[i].LastTransitionTime.IsZero() {
			want.Conditions[i].LastTransitionTime, want.Conditions[i].LastUpdateTime = now, now
		}
	}
	out := d.DeepCopy()
	out.Status = want
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(out)
	if err != nil {
		return err
	}
	// Objects from an informer have no kind; the client needs one.
	u["apiVersion"], u["kind"] = "apps/v1", "Deployment"
	cluster := clusterinformer.ClusterOf(d)
	dyn, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	_, err = dyn.Resource(appsv1.SchemeGroupVersion.WithResource("deployments")).Namespace(d.Namespace).
		UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: name})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or changed since: its next event brings it back.
		return nil
	}
	return err
}

// sameStatus compares statuses without the conditions' times.
func sameStatus(a, b appsv1.DeploymentStatus) bool {
	strip := func(s appsv1.DeploymentStatus) appsv1.DeploymentStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastUpdateTime, s.Conditions[i].LastTransitionTime = metav1.Time{}, metav1.Time{}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}
