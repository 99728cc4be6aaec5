package embeddedkine

import (
	"context"
	"errors"
	"testing"

	kineserver "github.com/k3s-io/kine/pkg/server"
)

// A create is confirmed by its row only when the row at the reported
// revision is this key with these bytes; everything else goes to the
// confirmation through kine.
func TestConfirmedByRow(t *testing.T) {
	rows := map[int64][2]string{7: {"/registry/a", "mine"}, 8: {"/registry/b", "other"}}
	b := checkedWrites{rowAt: func(_ context.Context, rev int64) (string, []byte, bool, error) {
		if rev == 9 {
			return "", nil, false, errors.New("connection refused")
		}
		r, ok := rows[rev]
		return r[0], []byte(r[1]), ok, nil
	}}
	ctx := context.Background()
	for _, c := range []struct {
		key, value string
		rev        int64
		want       bool
	}{
		{"/registry/a", "mine", 7, true},
		{"/registry/a", "mine!", 7, false}, // same key, other bytes: not this create
		{"/registry/a", "mine", 8, false},  // kine reported someone else's revision
		{"/registry/a", "mine", 6, false},  // no row there
		{"/registry/a", "mine", 9, false},  // the read failed
		{"/registry/a", "mine", 0, false},
	} {
		if got := b.confirmedByRow(ctx, c.key, []byte(c.value), c.rev); got != c.want {
			t.Errorf("%s %q at %d: %v, want %v", c.key, c.value, c.rev, got, c.want)
		}
	}
	if (checkedWrites{}).confirmedByRow(ctx, "/registry/a", []byte("mine"), 7) {
		t.Error("confirmed without a row reader")
	}
}

// Writes, holding two of kine's connections each, never take all of a
// bounded pool.
func TestMaxWriters(t *testing.T) {
	for maxOpen, want := range map[int]int{0: 0, -1: 0, 1: 1, 2: 1, 3: 1, 4: 1, 15: 7, 30: 14} {
		got := maxWriters(maxOpen)
		if got != want {
			t.Errorf("maxWriters(%d) = %d, want %d", maxOpen, got, want)
		}
		if maxOpen >= 3 && 2*got >= maxOpen {
			t.Errorf("maxWriters(%d) = %d: writes could hold every connection", maxOpen, got)
		}
	}
}

type ctxKey struct{}

// On SQLite's serial writer a write runs without its caller's cancellation
// (mattn/go-sqlite3 runs a statement whose context can be cancelled on a
// goroutine of its own, and the writer would wait to be scheduled after
// each), keeping the context's values; a write whose caller has already
// gone is handed the cancelled context, so it fails at once as before.
// Elsewhere the caller's context is passed as it is.
func TestWriteContext(t *testing.T) {
	ctx, stop := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer stop()
	serialCtx, stopWriter := context.WithCancel(context.Background())
	defer stopWriter()
	serial := checkedWrites{serial: newSerialWriter(serialCtx)}
	bounded := checkedWrites{writers: make(chan struct{}, 1)}

	var got context.Context
	serial.write(ctx, func(c context.Context) { got = c })
	if got.Done() != nil || got.Value(ctxKey{}) != "v" {
		t.Errorf("serial write: Done() %v, value %v; want no cancellation and the caller's values", got.Done(), got.Value(ctxKey{}))
	}
	bounded.write(ctx, func(c context.Context) { got = c })
	if got != ctx {
		t.Error("a write off the serial writer does not get its caller's context")
	}

	stop()
	serial.write(ctx, func(c context.Context) { got = c })
	if got.Err() == nil {
		t.Error("a serial write whose caller has gone got a live context: it would be stored for nobody")
	}
}

// failingBackend fails every write, as a datastore does when its caller's
// context is cancelled mid-way (mattn/go-sqlite3 answers "interrupted") or
// when it cannot store (a full disk).
type failingBackend struct {
	kineserver.Backend
	err error
}

func (f failingBackend) Create(context.Context, string, []byte, int64) (int64, error) {
	return 0, f.err
}
func (f failingBackend) Update(context.Context, string, []byte, int64, int64) (int64, *kineserver.KeyValue, bool, error) {
	return 0, nil, false, f.err
}
func (f failingBackend) Delete(context.Context, string, int64) (int64, *kineserver.KeyValue, bool, error) {
	return 0, nil, false, f.err
}
func (f failingBackend) Get(context.Context, string, int64, bool) (int64, *kineserver.KeyValue, error) {
	return 0, nil, f.err
}

// A write that fails because its caller went away (a client cancelled its
// create) is no datastore fault: the datastore stays healthy and the caller
// gets its context's error. The same failure of a waiting caller is one.
func TestCancelledWriteIsNoFault(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	h := &Health{}
	b := checkedWrites{Backend: failingBackend{err: errors.New("interrupted")}, health: h}
	writes := map[string]func(context.Context) error{
		"create": func(ctx context.Context) error { _, err := b.Create(ctx, "/k", []byte("v"), 0); return err },
		"update": func(ctx context.Context) error { _, _, _, err := b.Update(ctx, "/k", []byte("v"), 3, 0); return err },
		"delete": func(ctx context.Context) error { _, _, _, err := b.Delete(ctx, "/k", 3); return err },
	}
	for name, write := range writes {
		if err := write(cancelled); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
		if h.failing.Load() {
			t.Fatalf("%s with a cancelled context marked the datastore unhealthy", name)
		}
	}
	if err := writes["create"](context.Background()); err == nil || !h.failing.Load() {
		t.Errorf("a failed create of a waiting caller: %v, failing %v; want an error and the datastore unhealthy", err, h.failing.Load())
	}
}
