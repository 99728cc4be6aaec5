package incarnations

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/keys"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// EtcdCreateRevision reads the create revision of a cluster's LogicalCluster
// from the etcd API of the embedded kine at endpoint (the object carries only
// its latest revision; etcd keeps the first one per key), below prefix
// ("/registry").
func EtcdCreateRevision(endpoint, prefix string) (func(context.Context, logicalcluster.Name) (int64, error), func(), error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the datastore at %s for incarnation revisions: %w", endpoint, err)
	}
	res := keys.ResourcePrefix(tenancy.LogicalClustersResource.GroupResource())
	return func(ctx context.Context, c logicalcluster.Name) (int64, error) {
		key, err := keys.WithCluster(res, res+"/"+tenancy.LogicalClusterName, c)
		if err != nil {
			return 0, err
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, prefix+key)
		if err != nil {
			return 0, err
		}
		if len(resp.Kvs) == 0 {
			return 0, fmt.Errorf("no LogicalCluster at %s%s", prefix, key)
		}
		return resp.Kvs[0].CreateRevision, nil
	}, func() { cli.Close() }, nil
}
