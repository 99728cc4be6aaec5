// Package kinetest starts the server's embedded kine on a fresh datastore
// for tests of code that writes through it.
package kinetest

import (
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
