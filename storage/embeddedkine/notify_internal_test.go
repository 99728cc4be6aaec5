package embeddedkine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
)

// TestNotifyOtherReplicasOnly: two replicas on one PostgreSQL database,
// neither polling on its own (kine's poll interval an hour), so a watch
// sees another replica's writes only through the notifications replicas
// send after writing. Replica B sees every write of replica A; A ignores
// the notifications of its own writes (they carry its writer name) and
// makes no wake-up query for them, and still sees its own writes.
func TestNotifyOtherReplicasOnly(t *testing.T) {
	ds := datastoretest.Migrated(t, datastoretest.PostgresDSN(t))
	start := func() *Kine {
		db, err := ds.Open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		cfg := NewConfig(ds, t.TempDir())
		cfg.DB = db
		cfg.PollInterval = time.Hour
		k, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		return k
	}
	a, b := start(), start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for a.listening.Load() == 0 || b.listening.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the replicas did not begin listening")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rev, err := a.backend.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const writes = 5
	seen := func(k *Kine) <-chan []string {
		out := make(chan []string, 1)
		go func() {
			var keys []string
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			_ = k.Watch(wctx, "/registry/test/", rev, func(_ watch.EventType, key string, _ []byte, _ int64) error {
				keys = append(keys, key)
				if len(keys) == writes {
					stop()
				}
				return nil
			})
			out <- keys
		}()
		return out
	}
	onA, onB := seen(a), seen(b)
	wakeUpsBefore := a.wakeUps.Load()
	for i := range writes {
		if _, exists, err := a.CreateKey(ctx, fmt.Sprintf("/registry/test/k%d", i), []byte(`{"kind":"Test"}`)); err != nil || exists {
			t.Fatalf("create %d: exists %v, %v", i, exists, err)
		}
	}
	for name, ch := range map[string]<-chan []string{"A (the writer)": onA, "B": onB} {
		if keys := <-ch; len(keys) != writes {
			t.Errorf("replica %s saw %d of %d writes: %v", name, len(keys), writes, keys)
		}
	}
	// Writes close together share a notification.
	for a.ownWrites.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if a.ownWrites.Load() == 0 {
		t.Errorf("replica A recognised none of the notifications of its %d writes as its own", writes)
	}
	if n := a.wakeUps.Load() - wakeUpsBefore; n != 0 {
		t.Errorf("replica A woke its kine %d times for its own writes", n)
	}
	if b.wakeUps.Load() == 0 || b.ownWrites.Load() != 0 {
		t.Errorf("replica B: %d wake-ups, %d notifications taken as its own; want some and none", b.wakeUps.Load(), b.ownWrites.Load())
	}
}
