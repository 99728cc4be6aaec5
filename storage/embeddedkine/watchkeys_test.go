package embeddedkine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
)

// change is one call of Kine.Watch's fn.
type change struct {
	t     watch.EventType
	key   string
	value string
	rev   int64
}

// TestWatchKeys: Kine.Watch, which the server's caches of Workspaces and
// LogicalClusters continue their lists with, delivers exactly the changes
// below its prefix after its revision, in order, as the API server's watch
// would: a creation as Added, an update as Modified, a deletion as Deleted
// with the value the key had and the deletion's revision, a key created
// again as Added; nothing from other prefixes (including one that shares
// the prefix's first characters) or from before the revision. A watch from
// a compacted revision fails with an error the informer reads as 410
// Expired (it then lists again), and one whose context ends returns nil.
func TestWatchKeys(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			k := kinetest.StartCompactingOnRequest(t, d.DSN(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := k.Client()
			defer c.Close()
			const prefix = "/registry/tenancy.kcp.io/workspaces/"
			put := func(key, value string, expect int64) int64 {
				t.Helper()
				r, err := c.Kubernetes.OptimisticPut(ctx, key, []byte(value), expect, etcdkubernetes.PutOptions{GetOnFailure: true})
				if err != nil || !r.Succeeded {
					t.Fatalf("put %s: %+v %v", key, r, err)
				}
				return r.Revision
			}
			del := func(key string, expect int64) int64 {
				t.Helper()
				r, err := c.Kubernetes.OptimisticDelete(ctx, key, expect, etcdkubernetes.DeleteOptions{GetOnFailure: true})
				if err != nil || !r.Succeeded {
					t.Fatalf("delete %s: %+v %v", key, r, err)
				}
				return r.Revision
			}
			before := put(prefix+"root/before", "b1", 0)
			from, err := k.Range(ctx, prefix, func(string, []byte, int64) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if from < before {
				t.Fatalf("range at %d, before the write at %d", from, before)
			}

			got := make(chan change, 100)
			wctx, wcancel := context.WithCancel(ctx)
			ended := make(chan error, 1)
			go func() {
				ended <- k.Watch(wctx, prefix, from, func(t watch.EventType, key string, value []byte, rev int64) error {
					got <- change{t, key, string(value), rev}
					return nil
				})
			}()

			var want []change
			r := put(prefix+"root/a", "a1", 0)
			want = append(want, change{watch.Added, prefix + "root/a", "a1", r})
			put("/registry/tenancy.kcp.io/workspacesother/root/x", "x", 0) // shares the prefix's start, not the prefix
			put("/registry/core/configmaps/root/ns/c", "c", 0)
			r2 := put(prefix+"root/a", "a2", r)
			want = append(want, change{watch.Modified, prefix + "root/a", "a2", r2})
			r3 := del(prefix+"root/a", r2)
			want = append(want, change{watch.Deleted, prefix + "root/a", "a2", r3})
			r4 := put(prefix+"c1/b", "b", 0)
			want = append(want, change{watch.Added, prefix + "c1/b", "b", r4})
			r5 := put(prefix+"root/a", "a3", 0)
			want = append(want, change{watch.Added, prefix + "root/a", "a3", r5})

			for i, w := range want {
				select {
				case g := <-got:
					if g != w {
						t.Fatalf("change %d: got %+v, want %+v", i, g, w)
					}
				case <-ctx.Done():
					t.Fatalf("change %d (%+v) never came", i, w)
				}
			}
			// Nothing else: a change of another prefix would come before
			// this marker's.
			marker := put(prefix+"root/marker", "m", 0)
			select {
			case g := <-got:
				if g.rev != marker {
					t.Fatalf("got %+v, want only the marker at %d", g, marker)
				}
			case <-ctx.Done():
				t.Fatal("the marker never came")
			}
			wcancel()
			select {
			case err := <-ended:
				if err != nil {
					t.Fatalf("a watch whose context ended returned %v, want nil", err)
				}
			case <-ctx.Done():
				t.Fatal("the watch did not return after its context ended")
			}

			// fn's error ends the watch with it.
			stop := fmt.Errorf("stop here")
			if err := k.Watch(ctx, prefix, from, func(watch.EventType, string, []byte, int64) error { return stop }); err != stop {
				t.Fatalf("fn's error: got %v", err)
			}

			// Compacted: 410 Expired.
			latest := put(prefix+"root/late", "l", 0)
			if _, err := c.Compact(ctx, latest); err != nil {
				t.Fatalf("compact: %v", err)
			}
			err = k.Watch(ctx, prefix, before, func(t watch.EventType, key string, _ []byte, rev int64) error {
				return fmt.Errorf("a watch from a compacted revision delivered %s %s at %d", t, key, rev)
			})
			if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "too old resource version") {
				t.Fatalf("watch from compacted revision %d: got %v, want 410 Expired", before, err)
			}

			if err := k.Watch(ctx, "/registry/no-slash", 0, nil); err == nil {
				t.Fatal("a prefix without a trailing / was accepted")
			}
		})
	}
}
