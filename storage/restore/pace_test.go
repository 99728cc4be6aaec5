package restore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
)

// creates is a plan of n creates of config maps in cluster.
func creates(cluster string, n int) *Plan {
	p := &Plan{}
	for i := range n {
		p.Changes = append(p.Changes, Change{Key: fmt.Sprintf("/registry/core/configmaps/%s/default/cm-%d", cluster, i), Action: Create,
			Value: []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d","namespace":"default"}}`, i))})
	}
	order(p.Changes)
	return p
}

// A paced restore writes no faster than its rate, through kine on SQLite
// as the server writes, and tells its progress after every write; two
// restores through one paced writer share the rate (it is the server's).
func TestApplyPaced(t *testing.T) {
	k := kinetest.Start(t, datastoretest.SQLiteDSN(t))
	if Paced(k, 0) != Writer(k) || Paced(k, -1) != Writer(k) {
		t.Fatal("a rate of 0 or less is not without a bound")
	}
	const n, perSecond = 120, 200.0
	// The first writes may start at once (the limiter's burst); every
	// other one waits its turn. The slack is for the clock, not the work.
	least := time.Duration(float64(n-paceBurst(perSecond))/perSecond*float64(time.Second)) - 50*time.Millisecond
	ctx := context.Background()

	t.Run("one restore", func(t *testing.T) {
		w := Paced(k, perSecond)
		var seen []int
		t0 := time.Now()
		done, moved, err := Apply(ctx, w, creates("root:one", n), func(d, total int) {
			if total != n {
				t.Errorf("progress total %d, want %d", total, n)
			}
			seen = append(seen, d)
		})
		took := time.Since(t0)
		if err != nil || done != n || len(moved) != 0 {
			t.Fatalf("Apply = %d, %v, %v", done, moved, err)
		}
		if took < least {
			t.Errorf("%d writes at %.0f a second took %s, less than %s", n, perSecond, took, least)
		}
		for i, d := range seen {
			if d != i+1 {
				t.Fatalf("progress %v: not one more after each write", seen)
			}
		}
		if len(seen) != n {
			t.Errorf("%d progress reports, want %d", len(seen), n)
		}
		for _, i := range []int{0, n - 1} {
			if v, _, err := k.GetKey(ctx, fmt.Sprintf("/registry/core/configmaps/root:one/default/cm-%d", i)); err != nil || v == nil {
				t.Errorf("cm-%d not stored: %v", i, err)
			}
		}
	})

	t.Run("two restores share the rate", func(t *testing.T) {
		w := Paced(k, perSecond)
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, c := range []string{"root:two", "root:three"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if done, _, err := Apply(ctx, w, creates(c, n/2), nil); err != nil || done != n/2 {
					t.Errorf("Apply into %s = %d, %v", c, done, err)
				}
			}()
		}
		wg.Wait()
		if took := time.Since(t0); took < least {
			t.Errorf("two restores of %d writes each at %.0f a second in all took %s, less than %s", n/2, perSecond, took, least)
		}
	})

	t.Run("cancelled while waiting", func(t *testing.T) {
		w := Paced(k, 1)
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(200 * time.Millisecond); cancel() }()
		done, _, err := Apply(cctx, w, creates("root:four", 10), nil)
		if err == nil || done >= 10 {
			t.Errorf("Apply at 1 a second, cancelled after 200 ms = %d, %v; want it stopped with an error", done, err)
		}
	})
}
