package embeddedkine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"sync/atomic"
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

// maxApplicationName is the longest application_name PostgreSQL keeps
// (NAMEDATALEN-1 bytes); it cuts longer ones.
const maxApplicationName = 63

// namedWriter returns the datastore URL for kine's connections with an
// application_name of this replica's own: the URL's application_name (or
// "kcp") followed by a random suffix, such as kcp-5c1e0a9b3f7d. The trigger
// on kine's table sends the writing session's application_name with its
// notification (migrations/postgres/0008), so a replica can tell its own
// writes from the others'. writer is that name; it is empty, and the URL
// unchanged, where PostgreSQL would not keep the name as given (a name
// outside printable ASCII, which it rewrites): the replica then wakes for
// its own writes too, as before.
func namedWriter(u *url.URL) (named *url.URL, writer string) {
	q := u.Query()
	base := q.Get("application_name")
	if base == "" {
		base = "kcp"
	}
	for i := 0; i < len(base); i++ {
		if base[i] < 0x20 || base[i] > 0x7e {
			return u, ""
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := "-" + hex.EncodeToString(b[:])
	if len(base) > maxApplicationName-len(suffix) {
		base = base[:maxApplicationName-len(suffix)]
	}
	writer = base + suffix
	q.Set("application_name", writer)
	c := *u
	c.RawQuery = q.Encode()
	return &c, writer
}

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
