package embeddedkine_test

import (
	"testing"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine"
)

// TestReplicasStartKineTogether: kine v0.17.5 creates its compact_rev_key
// row on its first start on a database, after looking for it outside any
// lock, so replicas starting together on a new PostgreSQL database raced
// and all but one failed to start ("duplicate key given in txn request").
// Every replica must start, and the database must hold one such row.
func TestReplicasStartKineTogether(t *testing.T) {
	for round := range 5 {
		ds := datastoretest.Migrated(t, datastoretest.PostgresDSN(t))
		const replicas = 4
		errs := make(chan error, replicas)
		started := make(chan *embeddedkine.Kine, replicas)
		for range replicas {
			go func() {
				k, err := embeddedkine.Start(embeddedkine.NewConfig(ds, t.TempDir()))
				if err == nil {
					started <- k
				}
				errs <- err
			}()
		}
		for range replicas {
			if err := <-errs; err != nil {
				t.Errorf("round %d: a replica starting with %d others: %v", round, replicas-1, err)
			}
		}
		close(started)
		for k := range started {
			k.Stop()
		}
		db, err := ds.Open()
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM kine WHERE name = 'compact_rev_key'`).Scan(&n); err != nil || n != 1 {
			t.Errorf("round %d: %d compact_rev_key rows (%v), want 1", round, n, err)
		}
		db.Close()
		if t.Failed() {
			return
		}
	}
}
