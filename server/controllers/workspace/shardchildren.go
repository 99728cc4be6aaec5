package workspace

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// ShardChildren deletes the data of logical clusters that this shard holds
// for a Workspace on another shard, once that shard deleted their
// LogicalCluster (it carries ShardDataFinalizer, so it stays, with a
// deletionTimestamp, until its data is gone): every object of the cluster
// is deleted through the storage layer, the LogicalCluster last, as the
// shard of the parent would have deleted a cluster of its own.
type ShardChildren struct {
	queue             workqueue.TypedRateLimitingInterface[logicalcluster.Name]
	deleteClusterData func(context.Context, logicalcluster.Name) (int, error)
	// exists says whether the registry still knows the cluster.
	exists func(logicalcluster.Name) (bool, bool)
}

// NewShardChildren returns the deleter; feed it with Deleting (from the
// LogicalCluster registry's OnDeleting).
func NewShardChildren(deleteClusterData func(context.Context, logicalcluster.Name) (int, error), state func(logicalcluster.Name) (bool, bool)) *ShardChildren {
	return &ShardChildren{
		queue:             worker.NewQueue[logicalcluster.Name]("kcp-shard-children"),
		deleteClusterData: deleteClusterData,
		exists:            state,
	}
}

// Deleting queues a cluster whose LogicalCluster is being deleted.
func (s *ShardChildren) Deleting(c logicalcluster.Name) { s.queue.Add(c) }

// Run deletes until ctx ends.
func (s *ShardChildren) Run(ctx context.Context) {
	worker.Run(ctx, "kcp-shard-children", s.queue, 1, nil, func(ctx context.Context, c logicalcluster.Name) (time.Duration, error) {
		if exists, _ := s.exists(c); !exists {
			return 0, nil
		}
		n, err := s.deleteClusterData(ctx, c)
		if err != nil {
			return 0, err
		}
		klog.InfoS("deleted a logical cluster for the shard of its parent", "cluster", c, "objects", n)
		return 0, nil
	})
}
