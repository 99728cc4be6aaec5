package namespacedeletion

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/controller/namespace/deletion"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// requeueAfter asks for another pass once content that is still being
// deleted may be gone.
type requeueAfter struct{ after time.Duration }

func (r *requeueAfter) Error() string { return fmt.Sprintf("content remains, retry in %s", r.after) }

type reconciler struct {
	// newDeleter returns upstream's deleter bound to one logical cluster.
	newDeleter func(ctx context.Context, cluster logicalcluster.Name) (deletion.NamespacedResourcesDeleterInterface, error)
}

func (r *reconciler) reconcile(ctx context.Context, key string) error {
	cluster, _, nsName, err := clusterinformer.SplitKey(key)
	if err != nil {
		return nil // not ours to retry
	}
	d, err := r.newDeleter(ctx, cluster)
	if err != nil {
		return err
	}
	err = d.Delete(ctx, nsName)
	var remaining *deletion.ResourcesRemainingError
	if errors.As(err, &remaining) {
		after := time.Duration(remaining.Estimate/2+1) * time.Second
		return &requeueAfter{after: after}
	}
	return err
}

// deleterFactory builds deleters whose clients reach only /clusters/<cluster>.
func deleterFactory(loopback *rest.Config) func(context.Context, logicalcluster.Name) (deletion.NamespacedResourcesDeleterInterface, error) {
	clients, clientsErr := clusterinformer.NewClients(loopback)
	return func(ctx context.Context, cluster logicalcluster.Name) (deletion.NamespacedResourcesDeleterInterface, error) {
		if cluster.IsWildcard() || cluster == "" {
			return nil, fmt.Errorf("namespace without a logical cluster")
		}
		if clientsErr != nil {
			return nil, clientsErr
		}
		client, err := clients.Kubernetes(cluster)
		if err != nil {
			return nil, err
		}
		meta, err := clients.Metadata(cluster)
		if err != nil {
			return nil, err
		}
		discover := func() ([]*metav1.APIResourceList, error) {
			return client.Discovery().ServerPreferredNamespacedResources()
		}
		return deletion.NewNamespacedResourcesDeleter(ctx, client.CoreV1().Namespaces(), meta, client.CoreV1(), discover, corev1.FinalizerKubernetes), nil
	}
}
