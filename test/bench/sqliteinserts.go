package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	_ "github.com/mattn/go-sqlite3" // the driver kcp links, at go.mod's version

	"github.com/kcpsql/kcp/migrations"
	"github.com/kcpsql/kcp/storage/datastore"
)

var sqliteInserts = flag.Int("sqlite-inserts", 0, "only measure the SQLite driver linked into kcp: run kine's insert statement this many times, one transaction each as kine's Append does, on a SQLite file with kcp's schema, and report CPU per insert (re-run before changing github.com/mattn/go-sqlite3's version: docs/performance.md, \"SQLite's driver\")")

// kineInsert is kine v0.17.5's insert statement (generic.insertSQL), as
// kine sends it.
const kineInsert = `
		INSERT INTO kine(name, created, deleted, create_revision, prev_revision, lease, value, old_value)
		WITH
		ikv AS (SELECT id, create_revision, value FROM kine WHERE id = ? AND deleted = 0)
		SELECT ?, ?, ?, (SELECT COALESCE(NULLIF(create_revision, 0), id) FROM ikv), ?, ?, ?, (SELECT value FROM ikv)
		WHERE COALESCE((SELECT MAX(id) FROM kine WHERE name = ?), 0) = ?
		`

// benchSQLiteInserts inserts n namespaces' worth of rows into a fresh,
// migrated SQLite file and returns the process's CPU time per insert.
func benchSQLiteInserts(n int, log func(string, ...any)) error {
	dir, err := os.MkdirTemp("", "kcp-bench-sqlite-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // a context that can end, as kine's are (the driver takes another path without one)
	ds, err := datastore.Parse("", dir)
	if err != nil {
		return err
	}
	if err := ds.Prepare(ctx); err != nil {
		return err
	}
	if _, err := migrations.Up(ctx, ds); err != nil {
		return err
	}
	db, err := sql.Open("sqlite3", ds.SQLiteDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version); err != nil {
		return err
	}
	value := []byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default","labels":{"kubernetes.io/metadata.name":"default"},"annotations":{"kcp.io/cluster":"root:ws"}},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"},"padding":"` + strings.Repeat("x", 300) + `"}`)
	cpu0, t0 := cpuSeconds(os.Getpid()), time.Now()
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("/registry/core/namespaces/root:ws-%07d/default", i)
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, kineInsert, 0, key, 1, 0, 0, 0, value, key, 0); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if (i+1)%(max(n/5, 1)) == 0 {
			log("  %d of %d inserts", i+1, n)
		}
	}
	cpu, wall := cpuSeconds(os.Getpid())-cpu0, time.Since(t0)
	fmt.Printf("| SQLite | inserts | CPU per insert (user and system) | wall per insert |\n|---|---|---|---|\n")
	fmt.Printf("| %s | %d | %.1f µs | %.1f µs |\n", version, n, cpu*1e6/float64(n), float64(wall.Microseconds())/float64(n))
	return nil
}
