package workspace

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// clients are the API clients of one logical cluster.
type clients struct {
	core    corev1client.CoreV1Interface
	rbac    rbacv1client.RbacV1Interface
	dynamic dynamic.Interface
}

type reconciler struct {
	clients           func(logicalcluster.Name) (*clients, error)
	serverURL         string
	deleteClusterData func(context.Context, logicalcluster.Name) (int, error)
	// limits are the caps the child's LogicalCluster has now (nil: not
	// kept in sync, as in unit tests).
	limits func(logicalcluster.Name) tenancy.Limits
	// frozen is the spec.frozen reason the child's LogicalCluster has now
	// (nil: not kept in sync).
	frozen func(logicalcluster.Name) string
	// ownerBindingServed: the storage layer serves the owner's binding.
	ownerBindingServed bool
	// storage takes the writes of a new workspace's own objects
	// (storagewrites.go); clusterState is the registry's view of clusters.
	storage      Storage
	clusterState func(logicalcluster.Name) (exists, terminating bool)
	// peers reach the other shards (nil: one server).
	peers *peers
	// stored remembers the new workspaces whose objects are stored and
	// that wait for the registry to route their cluster (see
	// storedWorkspaces).
	stored storedWorkspaces
}

func clientsFor(loopback *rest.Config) (func(logicalcluster.Name) (*clients, error), error) {
	cs, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	return func(c logicalcluster.Name) (*clients, error) { return clientsOf(cs, c) }, nil
}

// clientsOf are the clients of one cluster from cs.
func clientsOf(cs *clusterinformer.Clients, c logicalcluster.Name) (*clients, error) {
	core, err := cs.Core(c)
	if err != nil {
		return nil, err
	}
	rbac, err := cs.RBAC(c)
	if err != nil {
		return nil, err
	}
	d, err := cs.Dynamic(c)
	if err != nil {
		return nil, err
	}
	return &clients{core: core, rbac: rbac, dynamic: d}, nil
}

// self is this shard's name ("" in an installation of one server).
func (r *reconciler) self() string {
	if r.peers == nil {
		return ""
	}
	return r.peers.m.Self
}

// reconcile returns a delay after which to look again, or an error.
func (r *reconciler) reconcile(ctx context.Context, parent logicalcluster.Name, ws *unstructured.Unstructured) (time.Duration, error) {
	child, err := logicalcluster.Parse(string(parent.Join(ws.GetName())))
	if err != nil {
		return 0, r.setStatus(ctx, parent, ws, "", "", err.Error())
	}
	if shard := shardOf(ws); r.remote(shard) {
		if ws.GetDeletionTimestamp() != nil {
			return r.deleteRemote(ctx, parent, child, ws, shard)
		}
		if !slices.Contains(ws.GetFinalizers(), tenancy.WorkspaceFinalizer) {
			if err := r.addFinalizer(ctx, parent, ws); err != nil {
				return 0, err
			}
		}
		return r.bootstrapRemote(ctx, parent, child, ws, shard)
	}
	if ws.GetDeletionTimestamp() != nil {
		r.stored.forget(child)
		return r.delete(ctx, parent, child, ws)
	}
	return r.bootstrap(ctx, parent, child, ws)
}
