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
	datastore.SQLite: `SELECT k.name, k.id FROM kine AS k
		WHERE k.cluster = ? AND k.deleted = 0
		AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)
		ORDER BY k.name`,
	datastore.Postgres: `SELECT k.name, k.id FROM kine AS k
		WHERE k.cluster = $1 AND k.deleted = 0
		AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)
		ORDER BY k.name`,
}

// Deleter removes a key through kine if it is still at revision.
type Deleter interface {
	DeleteKey(ctx context.Context, key string, revision int64) (bool, error)
}

// Key is a live key and its current revision.
type Key struct {
	Name     string
	Revision int64
}

// Keys returns the live keys of a cluster.
func Keys(ctx context.Context, db *sql.DB, dialect datastore.Dialect, cluster logicalcluster.Name) ([]Key, error) {
	if cluster == "" || cluster.IsWildcard() {
		return nil, fmt.Errorf("invalid logical cluster %q", cluster)
	}
	rows, err := db.QueryContext(ctx, liveKeys[dialect], string(cluster))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []Key
	for rows.Next() {
		var k Key
		if err := rows.Scan(&k.Name, &k.Revision); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// DeleteAll deletes every live key of a cluster and returns how many. A key
// written concurrently is read again and deleted at its new revision.
func DeleteAll(ctx context.Context, db *sql.DB, dialect datastore.Dialect, kine Deleter, cluster logicalcluster.Name) (int, error) {
	total := 0
	for attempt := 0; attempt < 10; attempt++ {
		keys, err := Keys(ctx, db, dialect, cluster)
		if err != nil {
			return total, fmt.Errorf("listing the keys of %s: %v", cluster, err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		for _, k := range keys {
			deleted, err := kine.DeleteKey(ctx, k.Name, k.Revision)
			if err != nil {
				return total, fmt.Errorf("deleting %s: %v", k.Name, err)
			}
			if deleted {
				total++
			}
		}
	}
	return total, fmt.Errorf("logical cluster %s kept changing while it was deleted", cluster)
}
