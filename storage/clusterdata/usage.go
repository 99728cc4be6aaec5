package clusterdata

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// usage counts the live objects of a cluster and of every cluster inside
// it (root:a, root:a:b, root:a:b:c, not root:a-2) and the bytes of their
// stored values, as the view kcp_cluster_footprint does, through the
// cluster index (one range: the clusters between "<name>:" and "<name>;").
var usage = map[datastore.Dialect]string{
	datastore.SQLite: `SELECT COUNT(*), COALESCE(SUM(length(k.value)), 0) FROM kine AS k
		WHERE (k.cluster = ? OR (k.cluster > ? AND k.cluster < ?)) AND k.deleted = 0
		AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
	datastore.Postgres: `SELECT COUNT(*), COALESCE(SUM(length(k.value)), 0) FROM kine AS k
		WHERE (k.cluster = $1 OR (k.cluster > $2 AND k.cluster < $3)) AND k.deleted = 0
		AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
}

// Usage returns how many live objects a cluster and the clusters inside it
// store, and their bytes.
func Usage(ctx context.Context, db *sql.DB, dialect datastore.Dialect, cluster logicalcluster.Name) (objects, bytes int64, err error) {
	q, ok := usage[dialect]
	if !ok {
		return 0, 0, fmt.Errorf("no usage query for %s", dialect)
	}
	err = db.QueryRowContext(ctx, q, string(cluster), string(cluster)+":", string(cluster)+";").Scan(&objects, &bytes)
	return objects, bytes, err
}
