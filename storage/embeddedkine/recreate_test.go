package embeddedkine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
)

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
			k := kinetest.Start(t, d.DSN(t))
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
						rev, exists, err := k.CreateKey(ctx, key, []byte(fmt.Sprintf("%d %d", i, j)))
						if err != nil || exists {
							fail("create %d of %s: exists=%v, %v", j, key, exists, err)
							return
						}
						value, at, err := k.GetKey(ctx, key)
						if err != nil || value == nil || at != rev {
							fail("create %d of %s answered revision %d; the key reads %q at %d (%v)", j, key, rev, value, at, err)
							return
						}
						if ok, err := k.DeleteKey(ctx, key, rev); err != nil || !ok {
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
						if _, exists, err := k.CreateKey(ctx, fmt.Sprintf("/registry/core/configmaps/c/ns/other-%d-%d", i, j), []byte("x")); err != nil || exists {
							fail("create of another key: exists=%v, %v", exists, err)
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
