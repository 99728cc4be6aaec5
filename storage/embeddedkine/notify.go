package embeddedkine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/klog/v2"
)

// NotifyChannel is the PostgreSQL channel the kine table's trigger notifies
// (migrations/postgres/0003_notify.up.sql).
const NotifyChannel = "kcp_kine"

// wakeKey is a key that never exists; listing it costs one indexed lookup
// and makes kine compare the current revision with what it has seen.
const wakeKey = "/kcp.io/wake-up"

// listen wakes kine's poller whenever any replica writes: kine checks for
// new revisions when a list observes a newer current revision, so a
// notification turns into one cheap list instead of waiting for the next
// poll. Notifications arriving while a wake-up runs are folded into the next
// one. It reconnects with backoff until ctx ends.
func (k *Kine) listen(ctx context.Context, url string) {
	poke := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-poke:
				_, _, _ = k.backend.List(ctx, wakeKey, "", 1, 0, true)
			}
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := k.listenOnce(ctx, url, poke, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		klog.V(2).InfoS("listening for writes of other replicas failed; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 10*time.Second {
			backoff *= 2
		}
	}
}

func (k *Kine) listenOnce(ctx context.Context, url string, poke chan struct{}, connected func()) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	connected()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		select {
		case poke <- struct{}{}:
		default:
		}
	}
}
