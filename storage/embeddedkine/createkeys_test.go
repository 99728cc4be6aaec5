package embeddedkine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
)

// TestCreateKeys: the workspace controller's one-transaction create of a new
// cluster's objects. Keys without rows and keys whose last row is a
// deletion are created, each at its own revision, readable and updatable
// through kine like its own creates, and a watch from before sees each as
// Added, in order, without waiting for kine's next poll; a live key among
// them is left as it is; a live first key means nothing is written.
// Concurrent calls for the same keys create them once.
func TestCreateKeys(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			k := kinetest.Start(t, d.DSN(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const p = "/registry/things/c1/"
			mustCreate := func(key, value string) int64 {
				t.Helper()
				rev, exists, err := k.CreateKey(ctx, key, []byte(value))
				if err != nil || exists {
					t.Fatalf("create %s: %v (exists %v)", key, err, exists)
				}
				return rev
			}
			mustCreate(p+"b", "b0")
			crev := mustCreate(p+"c", "c0")
			if ok, err := k.DeleteKey(ctx, p+"c", crev); err != nil || !ok {
				t.Fatalf("delete c: %v %v", ok, err)
			}
			from, err := k.Range(ctx, p, func(string, []byte, int64) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 100)
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			go func() {
				_ = k.Watch(wctx, p, from, func(t watch.EventType, key string, value []byte, rev int64) error {
					got <- fmt.Sprintf("%s %s %s %d", t, key, value, rev)
					return nil
				})
			}()

			revs, exists, err := k.CreateKeys(ctx, []embeddedkine.KeyValue{
				{Key: p + "a", Value: []byte("a1")}, {Key: p + "b", Value: []byte("b1")},
				{Key: p + "c", Value: []byte("c1")}, {Key: p + "d", Value: []byte("d1")},
			})
			if err != nil || exists {
				t.Fatalf("CreateKeys: %v (exists %v)", err, exists)
			}
			if revs[1] != 0 || revs[0] <= from || revs[2] <= revs[0] || revs[3] <= revs[2] {
				t.Fatalf("revisions %v after %d: want a < c < d created, b left (0)", revs, from)
			}
			for i, want := range []string{"a1", "b0", "c1", "d1"} {
				key := p + string(rune('a'+i))
				v, rev, err := k.GetKey(ctx, key)
				if err != nil || string(v) != want {
					t.Fatalf("%s holds %q (%v), want %q", key, v, err, want)
				}
				if revs[i] != 0 && rev != revs[i] {
					t.Fatalf("%s at revision %d, CreateKeys said %d", key, rev, revs[i])
				}
			}
			// The watch hears of the three creates, in order; it would
			// wait for kine's poll (a second) without CreateKeys' nudge,
			// which this does not time: it checks what arrives.
			for _, i := range []int{0, 2, 3} {
				want := fmt.Sprintf("ADDED %s%c %c1 %d", p, 'a'+i, 'a'+i, revs[i])
				select {
				case g := <-got:
					if g != want {
						t.Fatalf("watch: got %q, want %q", g, want)
					}
				case <-ctx.Done():
					t.Fatalf("watch: nothing, want %q", want)
				}
			}
			// kine takes the rows as its own: an update of one.
			if rev, ok, err := k.UpdateKey(ctx, p+"c", []byte("c2"), revs[2]); err != nil || !ok || rev <= revs[3] {
				t.Fatalf("update c: rev %d %v %v", rev, ok, err)
			}

			// A live first key: nothing written.
			revs, exists, err = k.CreateKeys(ctx, []embeddedkine.KeyValue{{Key: p + "b", Value: []byte("b2")}, {Key: p + "e", Value: []byte("e1")}})
			if err != nil || !exists || revs != nil {
				t.Fatalf("CreateKeys over a live first key: %v %v %v, want exists and nothing written", revs, exists, err)
			}
			if v, _, err := k.GetKey(ctx, p+"e"); err != nil || v != nil {
				t.Fatalf("e was written (%q, %v) though the first key exists", v, err)
			}

			// Concurrent calls: each key created once. On PostgreSQL a
			// call that loses the race may fail (the key's unique
			// index) rather than find the key: its caller looks again.
			var mu sync.Mutex
			created, found := 0, 0
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					revs, exists, err := k.CreateKeys(ctx, []embeddedkine.KeyValue{
						{Key: p + "x", Value: fmt.Appendf(nil, "x%d", i)}, {Key: p + "y", Value: fmt.Appendf(nil, "y%d", i)},
					})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Logf("call %d: %v", i, err)
					case exists:
						found++
					case revs[0] > 0 && revs[1] > 0:
						created++
					default:
						t.Errorf("call %d created part: %v", i, revs)
					}
				}()
			}
			wg.Wait()
			if created != 1 {
				t.Fatalf("%d calls created x and y (%d found them), want 1", created, found)
			}
			xv, _, _ := k.GetKey(ctx, p+"x")
			yv, _, _ := k.GetKey(ctx, p+"y")
			if len(xv) < 2 || len(yv) < 2 || xv[1] != yv[1] {
				t.Fatalf("x=%q y=%q: not one call's pair", xv, yv)
			}
		})
	}
}
