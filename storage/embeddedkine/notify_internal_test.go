package embeddedkine

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
)

// TestNamedWriter: kine's connections are named after the URL's own
// application_name (or kcp) with a random suffix, within PostgreSQL's 63
// bytes, and the rest of the URL is kept; a name PostgreSQL would rewrite
// is left alone and gives no writer name.
func TestNamedWriter(t *testing.T) {
	for _, tc := range []struct{ in, prefix string }{
		{"postgres://u@h:5432/db?sslmode=disable", "kcp-"},
		{"postgres://u@h:5432/db?sslmode=disable&application_name=billing", "billing-"},
		{"postgres://u@h/db?application_name=" + strings.Repeat("x", 70), strings.Repeat("x", 50) + "-"},
		{"postgres://u@h/db?application_name=caf%C3%A9", ""},
	} {
		u, _ := url.Parse(tc.in)
		named, writer := namedWriter(u)
		if tc.prefix == "" {
			if writer != "" || named.String() != tc.in {
				t.Errorf("%s: writer %q, URL %s; want none and the URL unchanged", tc.in, writer, named)
			}
			continue
		}
		if !strings.HasPrefix(writer, tc.prefix) || len(writer) != len(tc.prefix)+12 || len(writer) > maxApplicationName {
			t.Errorf("%s: writer %q, want %s and 12 hex digits, at most %d bytes", tc.in, writer, tc.prefix, maxApplicationName)
		}
		q := named.Query()
		if q.Get("application_name") != writer || (strings.Contains(tc.in, "sslmode") && q.Get("sslmode") != "disable") ||
			named.Host != u.Host || named.Path != u.Path || named.User.String() != u.User.String() {
			t.Errorf("%s: named URL %s", tc.in, named)
		}
		if _, again := namedWriter(u); again == writer {
			t.Errorf("%s: two replicas got the same writer name %q", tc.in, writer)
		}
	}
}

// TestNotifyOtherReplicasOnly: two replicas on one PostgreSQL database,
// neither polling on its own (kine's poll interval an hour), so a watch
// sees another replica's writes only through its notifications. Replica B
// sees every write of replica A; A ignores the notifications of its own
// writes (they carry its connections' name) and makes no wake-up query for
// them, and still sees its own writes.
func TestNotifyOtherReplicasOnly(t *testing.T) {
	ds := datastoretest.Migrated(t, datastoretest.PostgresDSN(t))
	start := func() *Kine {
		cfg := NewConfig(ds, t.TempDir())
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
	for a.ownWrites.Load() < writes && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if n := a.ownWrites.Load(); n < writes {
		t.Errorf("replica A recognised %d notifications of its %d writes as its own", n, writes)
	}
	if n := a.wakeUps.Load() - wakeUpsBefore; n != 0 {
		t.Errorf("replica A woke its kine %d times for its own writes", n)
	}
	if b.wakeUps.Load() == 0 || b.ownWrites.Load() != 0 {
		t.Errorf("replica B: %d wake-ups, %d notifications taken as its own; want some and none", b.wakeUps.Load(), b.ownWrites.Load())
	}
}
