// Package datastoretest gives tests fresh datastores of both dialects: an
// empty database on the test PostgreSQL server (KCP_TEST_POSTGRES_DSN), or
// an SQLite file, migrated as kcp start migrates them.
package datastoretest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL driver

	"github.com/kcpsql/kcp/migrations"
	"github.com/kcpsql/kcp/storage/datastore"
)

// BaseDSN is the test PostgreSQL server: KCP_TEST_POSTGRES_DSN, or the
// local server CI provides.
func BaseDSN() string {
	if v := os.Getenv("KCP_TEST_POSTGRES_DSN"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// PostgresDSN creates an empty database for one test and drops it after.
// Without a reachable server it skips loudly, or fails when
// KCP_TEST_REQUIRE_POSTGRES=1 (as in CI).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return postgresDSN(t, true)
}

// UncreatedPostgresDSN names a database that does not exist yet (dropped
// after the test if something created it): for tests of creating it.
func UncreatedPostgresDSN(t testing.TB) string {
	t.Helper()
	return postgresDSN(t, false)
}

func postgresDSN(t testing.TB, create bool) string {
	t.Helper()
	base := BaseDSN()
	db, err := sql.Open("pgx", base)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		msg := fmt.Sprintf("PostgreSQL at %s is not reachable (%v); set KCP_TEST_POSTGRES_DSN", base, err)
		if os.Getenv("KCP_TEST_REQUIRE_POSTGRES") == "1" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING POSTGRES TEST: " + msg)
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := "kcp_test_" + hex.EncodeToString(b)
	if create {
		if _, err := db.Exec(`CREATE DATABASE ` + name); err != nil {
			t.Fatalf("creating database %s: %v", name, err)
		}
	}
	t.Cleanup(func() {
		defer db.Close()
		db.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`)
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// SQLiteDSN is a new SQLite file in the test's temporary directory.
func SQLiteDSN(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "kcp.db")
}

// Dialects names each dialect's fresh datastore, for tests that run on both.
var Dialects = []struct {
	Name string
	DSN  func(t testing.TB) string
}{{"sqlite", SQLiteDSN}, {"postgres", PostgresDSN}}

// Migrated parses dsn, prepares the datastore and applies kcp's migrations.
func Migrated(t testing.TB, dsn string) *datastore.Datastore {
	t.Helper()
	ds, err := datastore.Parse(dsn, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ds.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, ds); err != nil {
		t.Fatal(err)
	}
	return ds
}
