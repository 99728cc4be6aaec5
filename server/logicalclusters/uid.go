package logicalclusters

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// UID returns the UID of the cluster's LogicalCluster object, which tells
// one incarnation of a cluster name from the next; false while the cluster
// does not exist (root and the system cluster have none).
func (r *Registry) UID(c logicalcluster.Name) (string, bool) {
	ix := r.indexer.Load()
	if ix == nil {
		return "", false
	}
	obj, ok, err := (*ix).GetByKey(clusterinformer.Key(c, "", tenancy.LogicalClusterName))
	if err != nil || !ok {
		return "", false
	}
	m, ok := obj.(interface{ GetUID() types.UID })
	if !ok {
		return "", false
	}
	return string(m.GetUID()), true
}
