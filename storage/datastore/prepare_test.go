package datastore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
)

// TestPrepareConcurrently: replicas of a deployment start together on a
// PostgreSQL database that does not exist yet, and each creates it. Every
// one must go on (PostgreSQL answers the losers of the race 42P04, or
// 23505 when their catalog inserts collide), not exit with "creating
// database ... (grant CREATEDB or create it first)".
func TestPrepareConcurrently(t *testing.T) {
	dsn := datastoretest.UncreatedPostgresDSN(t)
	for round := range 3 {
		d, err := datastore.Parse(dsn, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 8)
		for range 8 {
			go func() { errs <- d.Prepare(context.Background()) }()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a replica starting with the others: %v", round, err)
			}
		}
		db, err := d.Open()
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Ping(); err != nil {
			t.Fatalf("round %d: the database after the replicas prepared it: %v", round, err)
		}
		db.Close()
		// Drop it for the next round's race (the test's cleanup drops it too).
		admin, err := sql.Open("pgx", datastoretest.BaseDSN())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + strings.TrimPrefix(d.URL.Path, "/") + ` WITH (FORCE)`); err != nil {
			t.Fatal(err)
		}
		admin.Close()
	}
}
