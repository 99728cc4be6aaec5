// Package kinetest starts the server's embedded kine on a fresh datastore
// for tests of code that writes through it.
package kinetest

import (
	"database/sql"
	"testing"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine"
)

// Start starts kine as the server does (checked writes, no served
// defaults) on a fresh, migrated datastore at dsn; it stops with the test.
func Start(t testing.TB, dsn string) *embeddedkine.Kine {
	t.Helper()
	return start(t, dsn, nil)
}

// StartCompactingOnRequest is Start with kine's periodic compaction off
// and no revisions kept from it, so that a test's compaction request
// (the etcd API's Compact) compacts right up to the revision it names.
func StartCompactingOnRequest(t testing.TB, dsn string) *embeddedkine.Kine {
	t.Helper()
	return start(t, dsn, func(c *embeddedkine.Config) { c.CompactInterval, c.CompactMinRetain = 0, 0 })
}

// StartCompactingOnRequestWithDB is StartCompactingOnRequest that also
// returns the datastore's connection pool, for reads of kine's table as
// kcp's own SQL reads it (storage/restore).
func StartCompactingOnRequestWithDB(t testing.TB, dsn string) (*embeddedkine.Kine, *sql.DB) {
	t.Helper()
	var db *sql.DB
	k := start(t, dsn, func(c *embeddedkine.Config) { c.CompactInterval, c.CompactMinRetain, db = 0, 0, c.DB })
	return k, db
}

func start(t testing.TB, dsn string, configure func(*embeddedkine.Config)) *embeddedkine.Kine {
	t.Helper()
	ds := datastoretest.Migrated(t, dsn)
	db, err := ds.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := embeddedkine.NewConfig(ds, t.TempDir())
	cfg.DB = db
	if configure != nil {
		configure(&cfg)
	}
	k, err := embeddedkine.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}
