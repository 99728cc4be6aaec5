package embeddedkine

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/klog/v2"
)

// NotifyChannel is the PostgreSQL channel on which replicas tell each other
// that they wrote (payload: the writer's name).
const NotifyChannel = "kcp_kine"

// notifySpacing is the least time between two notifications of one
// replica: the writes in between share the next one.
const notifySpacing = 2 * time.Millisecond

// writerName is a name for this replica's notifications, unique among the
// replicas of a datastore: kcp-5c1e0a9b3f7d.
func writerName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "kcp-" + hex.EncodeToString(b[:])
}

// notifier tells the other replicas that this one wrote: NOTIFY on
// NotifyChannel with its writer name, sent on its own connection after a
// write returns rather than by a trigger in the write's transaction. Inserts
// into kine commit one at a time (the commit-order lock of
// migrations/postgres/0006), and a NOTIFY in the inserting transaction did
// its work while that lock was held (docs/performance.md). Writes that come
// while a notification is being sent, or within notifySpacing of the last,
// share the next one. A failed NOTIFY is not retried: the other replicas'
// kine finds the rows at its next poll (every second).
type notifier struct {
	pending chan struct{}
}

// wrote records that a write was made (it may have failed: a notification
// too many costs the others one cheap query).
func (n *notifier) wrote() {
	select {
	case n.pending <- struct{}{}:
	default:
	}
}

// newNotifier starts sending notifications through db until ctx ends.
func newNotifier(ctx context.Context, wg *sync.WaitGroup, db *sql.DB, writer string) *notifier {
	n := &notifier{pending: make(chan struct{}, 1)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.pending:
			}
			// Later than kine's poll interval (a second by default) the
			// notification is of no use: the others have polled. Bounded, a
			// datastore that does not answer holds one of kcp's connections
			// for at most that long.
			nctx, cancel := context.WithTimeout(ctx, time.Second)
			if _, err := db.ExecContext(nctx, "SELECT pg_notify($1, $2)", NotifyChannel, writer); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("telling other replicas of a write failed; they find it at their next poll", "err", err)
			}
			cancel()
			select {
			case <-ctx.Done():
				return
			case <-time.After(notifySpacing):
			}
		}
	}()
	return n
}

// wakeKey is a key that never exists; listing it costs one indexed lookup
// and makes kine compare the current revision with what it has seen.
const wakeKey = "/kcp.io/wake-up"

// listen wakes kine's poller whenever another replica writes: kine checks
// for new revisions when a list observes a newer current revision, so a
// notification turns into one cheap list instead of waiting for the next
// poll. A notification of this replica's own write (its payload is writer)
// is ignored: kine's poller learns of it as kine writes it. Notifications
// arriving while a wake-up runs are folded into the next one. It reconnects
// with backoff until ctx ends.
func (k *Kine) listen(ctx context.Context, url, writer string) {
	poke := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-poke:
				k.wakeUps.Add(1)
				_, _, _ = k.backend.List(ctx, wakeKey, "", 1, 0, true)
			}
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := k.listenOnce(ctx, url, writer, poke, func() { backoff = 100 * time.Millisecond; k.listening.Add(1) })
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

func (k *Kine) listenOnce(ctx context.Context, url, writer string, poke chan struct{}, connected func()) error {
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
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if writer != "" && n.Payload == writer {
			k.ownWrites.Add(1)
			continue
		}
		select {
		case poke <- struct{}{}:
		default:
		}
	}
}

// notifyCounts are what the listener did: the times it began listening,
// notifications of this replica's own writes it ignored, and wake-ups of
// kine it made for other writes.
type notifyCounts struct {
	listening, ownWrites, wakeUps atomic.Int64
}
