// Package clusterdata finds and removes everything one logical cluster
// stores. Keys are found with SQL through the kine table's cluster index;
// they are deleted through kine, never with SQL, so that watchers see every
// deletion.
package clusterdata

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// liveKeys selects the keys of a cluster whose newest revision is not a
// deletion. One statement per dialect: only the placeholder differs.
var liveKeys = map[datastore.Dialect]string{
	datastore.SQLite: `SELECT k.name FROM kine AS k
		WHERE k.cluster = ? AND k.deleted = 0
		AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)
		ORDER BY k.name`,
	datastore.Postgres: `SELECT k.name FROM kine AS k
		WHERE k.cluster = $1 AND k.deleted = 0
		AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)
		ORDER BY k.name`,
}

// Deleter removes a key through kine (unconditionally).
type Deleter interface {
	DeleteKey(ctx context.Context, key string) error
}

// Keys returns the live keys of a cluster.
func Keys(ctx context.Context, db *sql.DB, dialect datastore.Dialect, cluster logicalcluster.Name) ([]string, error) {
	if cluster == "" || cluster.IsWildcard() {
		return nil, fmt.Errorf("invalid logical cluster %q", cluster)
	}
	rows, err := db.QueryContext(ctx, liveKeys[dialect], string(cluster))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// DeleteAll deletes every live key of a cluster and returns how many.
func DeleteAll(ctx context.Context, db *sql.DB, dialect datastore.Dialect, kine Deleter, cluster logicalcluster.Name) (int, error) {
	keys, err := Keys(ctx, db, dialect, cluster)
	if err != nil {
		return 0, fmt.Errorf("listing the keys of %s: %v", cluster, err)
	}
	for _, k := range keys {
		if err := kine.DeleteKey(ctx, k); err != nil {
			return 0, fmt.Errorf("deleting %s: %v", k, err)
		}
	}
	return len(keys), nil
}
