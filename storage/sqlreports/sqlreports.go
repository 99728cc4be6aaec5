// Package sqlreports runs read-only SQL against the datastore for operators:
// ad-hoc queries and named reports over the auditing views. Every query runs
// in a read-only transaction (SQLite: a read-only connection), so a report or
// a mistyped statement can never change what kine stores.
package sqlreports

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"github.com/kcpsql/kcp/storage/datastore"
)

// Report is a named query. Args are bound in order; "cluster" reports need
// a cluster.
type Report struct {
	Name         string
	Help         string
	NeedsCluster bool
	// NeedsSince reports take a start time after the cluster.
	NeedsSince bool
	// SQL per dialect; both read the views created by migrations.
	SQL map[datastore.Dialect]string
}

// Reports are the named reports `kcp sql --report` knows.
var Reports = map[string]Report{
	"tenants": {
		Name: "tenants", Help: "every logical cluster with its live objects and bytes",
		SQL: map[datastore.Dialect]string{
			datastore.SQLite:   `SELECT cluster, objects, bytes FROM kcp_cluster_footprint ORDER BY cluster`,
			datastore.Postgres: `SELECT cluster, objects, bytes FROM kcp_cluster_footprint ORDER BY cluster`,
		},
	},
	"footprint": {
		Name: "footprint", Help: "what one logical cluster stores, by API group and resource (needs --cluster)", NeedsCluster: true,
		SQL: map[datastore.Dialect]string{
			datastore.SQLite: `SELECT api_group, resource, COUNT(*) AS objects, SUM(bytes) AS bytes
				FROM kcp_objects WHERE cluster = ? GROUP BY api_group, resource ORDER BY bytes DESC`,
			datastore.Postgres: `SELECT api_group, resource, COUNT(*) AS objects, SUM(bytes) AS bytes
				FROM kcp_objects WHERE cluster = $1 GROUP BY api_group, resource ORDER BY bytes DESC`,
		},
	},
	"changes": {
		Name: "changes", Help: "changes of one logical cluster since --since, from the change history (needs --cluster; kcp start --change-history)", NeedsCluster: true, NeedsSince: true,
		SQL: map[datastore.Dialect]string{
			datastore.SQLite: `SELECT changed_at, operation, revision, key FROM kcp_changes
				WHERE cluster = ? AND changed_at >= ? ORDER BY id`,
			datastore.Postgres: `SELECT changed_at, operation, revision, key FROM kcp_changes
				WHERE cluster = $1 AND changed_at >= $2 ORDER BY id`,
		},
	},
	"audit": {
		Name: "audit", Help: "who did what in one logical cluster since --since (needs --cluster; kcp start --audit-to-datastore)", NeedsCluster: true, NeedsSince: true,
		SQL: map[datastore.Dialect]string{
			datastore.SQLite: `SELECT at, username, verb, api_group, resource, namespace, name, code FROM audit_events
				WHERE cluster = ? AND at >= ? AND stage IN ('ResponseComplete', 'Panic') ORDER BY id`,
			datastore.Postgres: `SELECT at, username, verb, api_group, resource, namespace, name, code FROM audit_events
				WHERE cluster = $1 AND at >= $2 AND stage IN ('ResponseComplete', 'Panic') ORDER BY id`,
		},
	},
	"placements": {
		Name: "placements", Help: "where each Deployment runs: its SyncTargets, each one's share of the replicas and how many are available there",
		SQL: map[datastore.Dialect]string{
			datastore.SQLite: `SELECT w.cluster, w.namespace, w.deployment, w.target, p.mode, w.replicas, w.available
				FROM kcp_workload_shares AS w JOIN kcp_placements AS p ON p.cluster = w.cluster AND p.namespace = w.namespace
				ORDER BY w.cluster, w.namespace, w.deployment, w.target`,
			datastore.Postgres: `SELECT w.cluster, w.namespace, w.deployment, w.target, p.mode, w.replicas, w.available
				FROM kcp_workload_shares AS w JOIN kcp_placements AS p ON p.cluster = w.cluster AND p.namespace = w.namespace
				ORDER BY w.cluster, w.namespace, w.deployment, w.target`,
		},
	},
	"objects": {
		Name: "objects", Help: "the live objects of one logical cluster (needs --cluster)", NeedsCluster: true,
		SQL: map[datastore.Dialect]string{
			datastore.SQLite: `SELECT api_group, resource, namespace, name, revision, bytes
				FROM kcp_objects WHERE cluster = ? ORDER BY api_group, resource, namespace, name`,
			datastore.Postgres: `SELECT api_group, resource, namespace, name, revision, bytes
				FROM kcp_objects WHERE cluster = $1 ORDER BY api_group, resource, namespace, name`,
		},
	},
}

// Names lists the reports, sorted.
func Names() []string {
	names := make([]string, 0, len(Reports))
	for n := range Reports {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Result is a query's columns and rows, values as strings (NULL as "").
type Result struct {
	Columns []string
	Rows    [][]string
}

// OpenReadOnly opens the datastore for reading only.
func OpenReadOnly(ds *datastore.Datastore) (*sql.DB, error) {
	if ds.Dialect == datastore.SQLite {
		return sql.Open("sqlite3", "file:"+ds.Path+"?mode=ro&_query_only=1&_busy_timeout=5000")
	}
	return ds.Open()
}

// Query runs one statement in a read-only transaction.
func Query(ctx context.Context, db *sql.DB, ds *datastore.Datastore, query string, args ...any) (*Result, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: ds.Dialect == datastore.Postgres})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() // read-only: nothing to commit
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, explain(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	res := &Result{Columns: cols}
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = v.String
		}
		res.Rows = append(res.Rows, row)
	}
	return res, explain(rows.Err())
}

func explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if strings.Contains(msg, "read-only") || strings.Contains(msg, "readonly") || strings.Contains(msg, "query_only") {
		return fmt.Errorf("%v: kcp sql only reads; change objects through the API", err)
	}
	return err
}
