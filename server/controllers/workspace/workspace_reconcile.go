package workspace

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// clients are the API clients of one logical cluster.
type clients struct {
	kube    kubernetes.Interface
	dynamic dynamic.Interface
}

type reconciler struct {
	clients           func(logicalcluster.Name) (*clients, error)
	serverURL         string
	deleteClusterData func(context.Context, logicalcluster.Name) (int, error)
}

func clientsFor(loopback *rest.Config) func(logicalcluster.Name) (*clients, error) {
	return func(c logicalcluster.Name) (*clients, error) {
		cfg := clusterinformer.ForCluster(loopback, c)
		k, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return &clients{kube: k, dynamic: d}, nil
	}
}

// reconcile returns a delay after which to look again, or an error.
func (r *reconciler) reconcile(ctx context.Context, parent logicalcluster.Name, ws *unstructured.Unstructured) (time.Duration, error) {
	child, err := logicalcluster.Parse(string(parent.Join(ws.GetName())))
	if err != nil {
		return 0, r.setStatus(ctx, parent, ws, "", "", err.Error())
	}
	if ws.GetDeletionTimestamp() != nil {
		return r.delete(ctx, parent, child, ws)
	}
	return 0, r.bootstrap(ctx, parent, child, ws)
}
