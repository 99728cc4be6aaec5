package embeddedkine

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	kineserver "github.com/k3s-io/kine/pkg/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kcpsql/kcp/storage/datastore"
)

// ErrWriteNotStored is the error a write gets when the datastore did not
// store it. The etcd client sees it as gRPC Unavailable; clusterstore turns
// that into 503 Service Unavailable with Retry-After.
var ErrWriteNotStored = status.Error(codes.Unavailable, "kcp: the datastore did not store the write")

// ErrWriteUnknown is the error a write gets when the datastore could not be
// asked whether it stored it (the connection failed again). Also 503: the
// client retries, and a retried create that finds its object answers 409.
var ErrWriteUnknown = status.Error(codes.Unavailable, "kcp: the datastore could not confirm the write")

// checkedWrites is kine's backend with writes that report what the database
// did, not what kine's error handling concluded. In kine v0.17.5,
// LogStructured.Create answers an INSERT that failed (database restarted,
// session killed, disk full) with a read of the key; when that read finds
// nothing it drops the insert's error and reports success at the current
// revision, so the API server acknowledged creates that were never stored.
// On PostgreSQL kine also runs the INSERT outside its transaction: when the
// commit then fails the row is stored anyway, and the create, finding its own
// row, answered AlreadyExists. Update and Delete have the same shape: a failed
// insert followed by a read looks like a conflict, which the API server
// retries forever.
//
// So every acknowledged create is confirmed by reading the key back at the
// revision kine reported (one indexed read), an AlreadyExists whose stored
// value is byte for byte the one being created is this create's own row, and
// an update or delete that "lost" to the very revision it expected did not
// lose to anyone: it failed. Only Create, Update and Delete are changed;
// reads, watches and compaction are kine's own.
//
// On SQLite the decorator also lets one write through to the database at a
// time (serial); the reads that check a write run outside that bound.
type checkedWrites struct {
	kineserver.Backend
	health *Health
	// serial runs the writes one after another on one goroutine (SQLite,
	// see write); nil elsewhere.
	serial *serialWriter
	// writers bounds the writes in flight (nil: no bound). PostgreSQL
	// with a bounded kine pool: fewer than half of its connections,
	// because kine v0.17.5's Append holds two of them at
	// once (its transaction's, idle, and the one the INSERT runs on); with
	// as many writes as connections, each held one and waited for another
	// for ever (every create of 64 clients timed out on a pool of 30).
	writers chan struct{}
	// background bounds the background writes in flight where writes run
	// concurrently (nil on SQLite, whose serial writer orders them).
	background chan struct{}
	// rowAt reads the row a revision created (nil: confirm through kine).
	rowAt func(ctx context.Context, rev int64) (key string, value []byte, found bool, err error)
	// createdRow finds the revision of the row that created key with
	// exactly these bytes and lease (nil: look through kine).
	createdRow func(ctx context.Context, key string, value []byte, lease int64) (rev int64, found bool, err error)
	// notify tells the other replicas after each write (nil: no one to
	// tell, or they poll).
	notify *notifier
}

// rowAt reads a row of the kine table by its id (its revision): the
// primary key, one indexed read.
func rowAt(db *sql.DB, dialect datastore.Dialect) func(context.Context, int64) (string, []byte, bool, error) {
	q := `SELECT name, value FROM kine WHERE id = $1 AND deleted = 0`
	if dialect == datastore.SQLite {
		q = strings.Replace(q, "$1", "?", 1)
	}
	return func(ctx context.Context, rev int64) (string, []byte, bool, error) {
		var key string
		var value []byte
		err := db.QueryRowContext(ctx, q, rev).Scan(&key, &value)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil, false, nil
		}
		return key, value, err == nil, err
	}
}

// createdRow finds the create row of key holding value under lease: its id
// is the create's revision whatever was written to the key since. The
// value carries the object's fresh UID, so the bytes name one create. A
// key has few rows (compaction keeps the latest of each), read through the
// (name, id) index.
func createdRow(db *sql.DB, dialect datastore.Dialect) func(context.Context, string, []byte, int64) (int64, bool, error) {
	q := `SELECT id FROM kine WHERE name = $1 AND created = 1 AND value = $2 AND lease = $3 ORDER BY id DESC LIMIT 1`
	if dialect == datastore.SQLite {
		q = strings.NewReplacer("$1", "?", "$2", "?", "$3", "?").Replace(q)
	}
	return func(ctx context.Context, key string, value []byte, lease int64) (int64, bool, error) {
		var rev int64
		err := db.QueryRowContext(ctx, q, key, value, lease).Scan(&rev)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return rev, err == nil, err
	}
}

// confirmedByRow reports whether the row at rev is this create's: its key
// with these bytes. Anything else (no such row, another key, a failed
// read) is left to the confirmation through kine, which tells the cases
// apart.
func (b checkedWrites) confirmedByRow(ctx context.Context, key string, value []byte, rev int64) bool {
	if b.rowAt == nil || rev <= 0 {
		return false
	}
	k, v, found, err := b.rowAt(ctx, rev)
	return err == nil && found && k == key && bytes.Equal(v, value)
}

// write runs one write to the database: on SQLite on the serial writer,
// elsewhere once writers has room. SQLite has one writer anyway, but
// writers on kine's other connections waited in SQLite's busy handler,
// which sleeps in growing steps (up to 100 ms each) rather than waking when
// the lock is free, and gave writes under 16 concurrent clients a p99 of
// about half a second. A one-slot semaphore handed the turn over at once
// but not the processor: each next writer had to be scheduled before it
// could start, and with the server busy that wait was twice the write
// itself (the slot stood idle 64% of the time while writes queued for
// 30 ms). The serial writer takes the next write as soon as the last one
// is done, without waiting for any goroutine to be scheduled.
//
// On the serial writer f gets the caller's context without its
// cancellation (its values kept). mattn/go-sqlite3 runs a statement
// whose context can be cancelled on a goroutine of its own (to interrupt
// it on cancellation), and kine's BEGIN and INSERT are two such
// statements: the serial writer parked after each and, with the server
// busy, waited for a processor before it could go on, the same wait as
// the semaphore's (docs/performance.md, "Creation: a workspace's
// objects stored once, SQLite's writes without goroutines"). A write
// takes well under a millisecond and the writer runs one at a time, so
// cancelling one mid-way gains nothing; a write whose caller has gone
// before the writer takes it is not started (f gets the cancelled context
// and fails at once, as before).
//
// Background writes (a restore's, Background) yield to the others: on
// SQLite the serial writer takes one only when no other write waits (with
// a share kept for them under a flood, see serialWriter), elsewhere at most
// backgroundWriters of them are in flight, so that a large restore does not
// queue ahead of every tenant's requests.
func (b checkedWrites) write(ctx context.Context, f func(context.Context)) {
	if b.notify != nil {
		defer b.notify.wrote()
	}
	b.run(ctx, f)
}

// run is write without telling other replicas (a write to kcp's own
// tables, which they do not poll).
func (b checkedWrites) run(ctx context.Context, f func(context.Context)) {
	bg := isBackground(ctx)
	switch {
	case b.serial != nil:
		run := b.serial.run
		if bg {
			run = b.serial.runBackground
		}
		run(func() {
			wctx := ctx
			if ctx.Err() == nil {
				wctx = context.WithoutCancel(ctx)
			}
			f(wctx)
		})
		return
	}
	if bg && b.background != nil {
		select {
		case b.background <- struct{}{}:
		case <-ctx.Done():
			f(ctx) // fails at once on the cancelled context
			return
		}
		defer func() { <-b.background }()
	}
	if b.writers != nil {
		b.writers <- struct{}{}
		defer func() { <-b.writers }()
	}
	f(ctx)
}

// backgroundKey marks a context's writes as background writes.
type backgroundKey struct{}

// Background marks the writes made with ctx as background writes (a
// restore's): they yield to every other write (checkedWrites.write).
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

func isBackground(ctx context.Context) bool {
	bg, _ := ctx.Value(backgroundKey{}).(bool)
	return bg
}

// backgroundWriters is how many background writes may be in flight at
// once on a datastore with concurrent writers (PostgreSQL).
const backgroundWriters = 2

// backgroundShare: under a flood of other writes, the serial writer still
// takes one waiting background write after this many others, so a restore
// finishes on a busy server too (at a ninth of the write rate or more).
const backgroundShare = 8

// serialWriter runs functions one at a time on its own goroutine, in the
// order they were handed to it; background ones only when no other waits,
// or after backgroundShare others in a row while one waited.
type serialWriter struct {
	reqs       chan serialWrite
	background chan serialWrite
	stopped    <-chan struct{}
}

type serialWrite struct {
	f    func()
	done chan any // the panic f raised, or nil; closed when f returned
}

// newSerialWriter starts the writer; it stops when ctx ends, and writes
// handed over after that run on their caller's goroutine (they fail in a
// datastore that is closing, as they would have).
func newSerialWriter(ctx context.Context) *serialWriter {
	w := &serialWriter{reqs: make(chan serialWrite), background: make(chan serialWrite), stopped: ctx.Done()}
	go func() {
		passed := 0 // other writes taken in a row while a background one could wait
		for {
			if passed < backgroundShare {
				select {
				case r := <-w.reqs:
					passed++
					w.do(r)
					continue
				default:
				}
			}
			select {
			case r := <-w.background:
				passed = 0
				w.do(r)
				continue
			default:
			}
			passed = 0
			select {
			case r := <-w.reqs:
				w.do(r)
			case r := <-w.background:
				w.do(r)
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

// do runs one write, handing a panic back to the caller's goroutine, where
// the API server turns it into a 500 for that request only.
func (w *serialWriter) do(r serialWrite) {
	defer func() {
		if p := recover(); p != nil {
			r.done <- p
		}
		close(r.done)
	}()
	r.f()
}

// run hands f to the writer and waits until it has run. The channel is
// unbuffered: a write handed over is one the writer has taken, so none is
// left behind when the writer stops.
func (w *serialWriter) run(f func()) { w.hand(w.reqs, f) }

// runBackground is run for a background write.
func (w *serialWriter) runBackground(f func()) { w.hand(w.background, f) }

func (w *serialWriter) hand(to chan serialWrite, f func()) {
	done := make(chan any, 1)
	select {
	case to <- serialWrite{f: f, done: done}:
		if p := <-done; p != nil {
			panic(p)
		}
	case <-w.stopped:
		f()
	}
}

// maxWriters is how many writes may be in flight on a pool of maxOpen
// connections (0: no bound): fewer than half, so that writes, holding two
// each, always leave one connection for a write to finish with, and reads
// and kine's poller find connections too.
func maxWriters(maxOpen int) int {
	if maxOpen <= 0 {
		return 0
	}
	return max(1, (maxOpen-1)/2)
}

// failed records a write the datastore did not store (Health: /readyz and
// the log) and returns ret, the error its caller gets; unless the write
// failed because its caller went away (a client that cancelled its request
// or closed its connection: the context was cancelled), which is no fault
// of the datastore: then nothing is recorded and the caller gets its
// context's error, which kine's bridge and clusterstore do not log either.
// A deadline that passed is recorded: the datastore took too long.
func (b checkedWrites) failed(ctx context.Context, cause, ret error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	b.health.failed(cause)
	return ret
}

func (b checkedWrites) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	var rev int64
	var err error
	b.write(ctx, func(ctx context.Context) { rev, err = b.Backend.Create(ctx, key, value, lease) })
	switch {
	case errors.Is(err, kineserver.ErrKeyExists):
		// Our own row, stored by an INSERT whose commit reported failure?
		own, ok, gerr := b.ownRow(ctx, key, value, lease)
		if ok {
			return own, nil
		}
		// kine answers AlreadyExists for any failed insert over a
		// deleted key's history; it is one only if the key is there.
		var kv *kineserver.KeyValue
		if gerr == nil {
			_, kv, gerr = b.Backend.Get(ctx, key, 0, true)
		}
		switch {
		case gerr != nil:
			// Unknown whether the key is ours or there: not a 409 a
			// client would take for "someone else made it".
			return 0, b.failed(ctx, fmt.Errorf("create %s: checking an AlreadyExists: %w", key, gerr), ErrWriteUnknown)
		case kv == nil:
			return 0, b.failed(ctx, fmt.Errorf("create %s: kine answered AlreadyExists but the key is not stored", key), ErrWriteNotStored)
		}
		return rev, err
	case err != nil:
		// The INSERT may have committed before the error (a connection
		// lost on the way back): then it is this create's row.
		if own, ok, _ := b.ownRow(ctx, key, value, lease); ok {
			return own, nil
		}
		return rev, b.failed(ctx, fmt.Errorf("create %s: %w", key, err), err)
	}
	// Confirm: the key as of the reported revision must be this create.
	// The row kine reports is read by its revision first: when it is this
	// create's, that is the answer.
	if b.confirmedByRow(ctx, key, value, rev) {
		b.health.succeeded()
		return rev, nil
	}
	// kine v0.17.5 reports a create of a key that existed before (deleted
	// since) at its current revision, not at the row it inserted: the
	// row's revision is found by its bytes.
	if own, ok, err := b.ownRow(ctx, key, value, lease); err == nil && ok {
		return own, nil
	}
	_, kv, gerr := b.Backend.Get(ctx, key, rev, false)
	if gerr != nil {
		return 0, b.failed(ctx, fmt.Errorf("confirming the create of %s at revision %d: %w", key, rev, gerr), ErrWriteUnknown)
	}
	if kv != nil && kv.ModRevision == rev && bytes.Equal(kv.Value, value) {
		b.health.succeeded()
		return rev, nil
	}
	if kv != nil {
		// The insert failed because the key exists (created by someone
		// else between kine's attempts): that is a true AlreadyExists.
		return rev, kineserver.ErrKeyExists
	}
	return 0, b.failed(ctx, fmt.Errorf("create %s: kine reported revision %d but the key is not stored", key, rev), ErrWriteNotStored)
}

// ownRow reports whether this create's row is stored (and its revision),
// or the error that kept it from finding out. The value carries the
// object's fresh UID, so equal bytes mean this create's row, not someone
// else's object. Without a row reader only the key's current row is
// compared.
func (b checkedWrites) ownRow(ctx context.Context, key string, value []byte, lease int64) (int64, bool, error) {
	if b.createdRow != nil {
		own, found, err := b.createdRow(ctx, key, value, lease)
		if err != nil || !found {
			return 0, false, err
		}
		b.health.succeeded()
		return own, true, nil
	}
	_, kv, err := b.Backend.Get(ctx, key, 0, false)
	if err != nil {
		return 0, false, err
	}
	if kv == nil || kv.Lease != lease || !bytes.Equal(kv.Value, value) {
		return 0, false, nil
	}
	b.health.succeeded()
	return kv.ModRevision, true, nil
}

func (b checkedWrites) Update(ctx context.Context, key string, value []byte, revision, lease int64) (int64, *kineserver.KeyValue, bool, error) {
	var rev int64
	var kv *kineserver.KeyValue
	var ok bool
	var err error
	b.write(ctx, func(ctx context.Context) { rev, kv, ok, err = b.Backend.Update(ctx, key, value, revision, lease) })
	if err != nil {
		return rev, kv, ok, b.failed(ctx, fmt.Errorf("update %s: %w", key, err), err)
	}
	if ok {
		b.health.succeeded()
		return rev, kv, ok, err
	}
	if kv != nil && kv.ModRevision == revision {
		// The key is still at the revision the update expected: nobody
		// won a race, the insert failed.
		return rev, nil, false, b.failed(ctx, fmt.Errorf("update %s at revision %d: not stored", key, revision), ErrWriteNotStored)
	}
	if kv != nil && kv.Lease == lease && bytes.Equal(kv.Value, value) {
		// Stored by an INSERT whose commit reported failure (PostgreSQL).
		b.health.succeeded()
		return kv.ModRevision, kv, true, nil
	}
	return rev, kv, ok, err
}

func (b checkedWrites) Delete(ctx context.Context, key string, revision int64) (int64, *kineserver.KeyValue, bool, error) {
	var rev int64
	var kv *kineserver.KeyValue
	var ok bool
	var err error
	b.write(ctx, func(ctx context.Context) { rev, kv, ok, err = b.Backend.Delete(ctx, key, revision) })
	if err != nil {
		return rev, kv, ok, b.failed(ctx, fmt.Errorf("delete %s: %w", key, err), err)
	}
	if !ok && kv != nil && (revision == 0 || kv.ModRevision == revision) {
		return rev, nil, false, b.failed(ctx, fmt.Errorf("delete %s at revision %d: not stored", key, revision), ErrWriteNotStored)
	}
	if ok {
		b.health.succeeded()
	}
	return rev, kv, ok, err
}
