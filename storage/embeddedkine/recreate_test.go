package embeddedkine

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
)

// startKine starts kine, as the server does, on a fresh datastore.
func startKine(t *testing.T, dsn string) *Kine {
	t.Helper()
	ds := datastoretest.Migrated(t, dsn)
	db, err := ds.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := NewConfig(ds, t.TempDir())
	cfg.DB = db
	k, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

// TestCreateAgainAfterDelete: a key created, deleted and created again,
// over and over, while other writers write other keys. Every create
// answers the revision of the row it stored (the key read back is at that
// revision), and every delete of it succeeds. kine v0.17.5 answers a create
// over a deleted key's history with its current revision, not the row's:
// with other writers at the same moment the confirmation found another
// revision and the create answered 503 or AlreadyExists though it was
// stored (a client's retry then got 409).
func TestCreateAgainAfterDelete(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			b := startKine(t, d.DSN(t)).backend
			ctx := context.Background()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failures []string
			fail := func(format string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				failures = append(failures, fmt.Sprintf(format, args...))
			}
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					key := fmt.Sprintf("/registry/core/configmaps/c/ns/again-%d", i)
					for j := 0; j < 100; j++ {
						rev, err := b.Create(ctx, key, []byte(fmt.Sprintf("%d %d", i, j)), 0)
						if err != nil {
							fail("create %d of %s: %v", j, key, err)
							return
						}
						_, kv, err := b.Get(ctx, key, 0, false)
						if err != nil || kv == nil || kv.ModRevision != rev {
							fail("create %d of %s answered revision %d; the key reads %+v (%v)", j, key, rev, kv, err)
							return
						}
						if _, _, ok, err := b.Delete(ctx, key, rev); err != nil || !ok {
							fail("delete %d of %s at %d: deleted=%v, %v", j, key, rev, ok, err)
							return
						}
					}
				}(i)
			}
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					for j := 0; j < 150; j++ {
						if _, err := b.Create(ctx, fmt.Sprintf("/registry/core/configmaps/c/ns/other-%d-%d", i, j), []byte("x"), 0); err != nil {
							fail("create of another key: %v", err)
							return
						}
					}
				}(i)
			}
			wg.Wait()
			for _, f := range failures {
				t.Error(f)
			}
		})
	}
}
