package embeddedkine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
)

// TestSharedWatchStream: every watch shares one stream of the datastore's
// changes (fanout.go), and a watch from an older revision reads its
// history first. Watches started while four writers write, from the
// current revision and from revisions already written, each see exactly
// the changes from their revision on, in order, none twice; a watch that
// is cancelled leaves the others going.
func TestSharedWatchStream(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			k := kinetest.Start(t, d.DSN(t))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := k.Client()
			defer c.Close()
			const prefix = "/registry/core/configmaps/fan/ns/"
			const writers, perWriter = 4, 60

			var mu sync.Mutex
			written := map[int64]string{} // revision -> key
			var last int64
			var wg sync.WaitGroup
			startWatches := make(chan struct{})
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < perWriter; i++ {
						if w == 0 && i == perWriter/3 {
							close(startWatches)
						}
						key := fmt.Sprintf("%sw%d-%d", prefix, w, i)
						r, err := c.Kubernetes.OptimisticPut(ctx, key, []byte("v"), 0, etcdkubernetes.PutOptions{})
						if err != nil || !r.Succeeded {
							t.Errorf("create %s: %v %v", key, r, err)
							return
						}
						mu.Lock()
						written[r.Revision] = key
						last = max(last, r.Revision)
						mu.Unlock()
					}
				}()
			}

			// Watches while the writers write: from now (0), from the
			// revision of the earliest write so far, from one in the middle.
			<-startWatches
			mu.Lock()
			var lowest, middle int64
			for r := range written {
				if lowest == 0 || r < lowest {
					lowest = r
				}
			}
			middle = last
			mu.Unlock()
			type watch struct {
				from   int64
				events clientv3.WatchChan
				cancel context.CancelFunc
			}
			var watches []*watch
			for _, from := range []int64{0, lowest, middle, lowest, 0} {
				wctx, wcancel := context.WithCancel(ctx)
				opts := []clientv3.OpOption{clientv3.WithPrefix()}
				if from != 0 {
					opts = append(opts, clientv3.WithRev(from))
				}
				watches = append(watches, &watch{from: from, events: c.Watch(wctx, prefix, opts...), cancel: wcancel})
			}
			// One more, cancelled at once: the others must not notice.
			gone := func() *watch {
				wctx, wcancel := context.WithCancel(ctx)
				w := &watch{from: lowest, events: c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(lowest)), cancel: wcancel}
				wcancel()
				return w
			}()
			_ = gone
			wg.Wait()
			if t.Failed() {
				return
			}

			for i, w := range watches {
				var got []int64
				seen := map[int64]bool{}
				first := int64(0)
			read:
				for {
					select {
					case wr, ok := <-w.events:
						if !ok {
							t.Fatalf("watch %d (from %d) ended after %d events", i, w.from, len(got))
						}
						if err := wr.Err(); err != nil {
							t.Fatalf("watch %d (from %d): %v", i, w.from, err)
						}
						for _, e := range wr.Events {
							r := e.Kv.ModRevision
							if seen[r] {
								t.Fatalf("watch %d (from %d): revision %d twice", i, w.from, r)
							}
							if len(got) > 0 && r < got[len(got)-1] {
								t.Fatalf("watch %d (from %d): revision %d after %d", i, w.from, r, got[len(got)-1])
							}
							if written[r] != string(e.Kv.Key) {
								t.Fatalf("watch %d (from %d): %s at %d, but %q was written there", i, w.from, e.Kv.Key, r, written[r])
							}
							seen[r] = true
							if first == 0 {
								first = r
							}
							got = append(got, r)
						}
						if len(got) > 0 && got[len(got)-1] == last {
							break read
						}
					case <-ctx.Done():
						t.Fatalf("watch %d (from %d): %d events, the last %v; want up to %d", i, w.from, len(got), got[max(0, len(got)-1):], last)
					}
				}
				// Every write from the watch's revision (from its first
				// event for a watch from now) to the last is there.
				from := w.from
				if from == 0 {
					from = first
				}
				want := 0
				for r := range written {
					if r >= from {
						want++
						if !seen[r] {
							t.Errorf("watch %d (from %d) missed revision %d (%s)", i, w.from, r, written[r])
						}
					}
				}
				if len(got) != want {
					t.Errorf("watch %d (from %d): %d events, want %d", i, w.from, len(got), want)
				}
				w.cancel()
			}
		})
	}
}
