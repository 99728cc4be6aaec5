// Package embeddedkine runs kine inside the kcp process: kine's SQL backend
// (only the sqlite and pgsql drivers are linked) behind its etcd gRPC bridge,
// served on a unix socket in the data directory, so no TCP port is opened.
package embeddedkine

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	_ "github.com/k3s-io/kine/pkg/drivers/pgsql"  // registers postgres://
	_ "github.com/k3s-io/kine/pkg/drivers/sqlite" // registers sqlite://
	kineserver "github.com/k3s-io/kine/pkg/server"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/serveddefaults"
)

// Config holds kine's settings. NewConfig starts from kine's own defaults: a
// zero-valued config busy-loops (poll batch size 0).
type Config struct {
	Datastore *datastore.Datastore
	// SocketDir is where the unix socket goes.
	SocketDir        string
	PollInterval     time.Duration
	PollBatchSize    int64
	CompactInterval  time.Duration
	CompactMinRetain int64
	CompactBatchSize int64
	CompactTimeout   time.Duration
	NotifyInterval   time.Duration
	EmulatedVersion  string
	Pool             generic.ConnectionPoolConfig
	// Notify wakes the poller on PostgreSQL notifications of other
	// replicas' writes instead of waiting for PollInterval, and sends such
	// notifications after this replica's writes (through DB; none without).
	Notify bool
	// ServedDefaultsCA, when set, serves every namespace's service account
	// "default" and config map "kube-root-ca.crt" (holding this CA), and
	// every workspace's ClusterRoleBinding "workspace-owner", without
	// storing them (storage/serveddefaults).
	ServedDefaultsCA string
	// DB, when set, is a connection to the same datastore through which a
	// create is confirmed by reading its row by revision (the table's
	// primary key) rather than through kine's revision-range query, which
	// cost more than the insert itself (checkedWrites).
	DB *sql.DB
}

// NewConfig returns kine's defaults (kine v0.17's command-line defaults).
func NewConfig(ds *datastore.Datastore, socketDir string) Config {
	return Config{
		Datastore:        ds,
		SocketDir:        socketDir,
		PollInterval:     time.Second,
		PollBatchSize:    500,
		CompactInterval:  5 * time.Minute,
		CompactMinRetain: 1000,
		CompactBatchSize: 1000,
		CompactTimeout:   5 * time.Second,
		NotifyInterval:   5 * time.Second,
		EmulatedVersion:  "3.6.11",
		Pool:             PoolConfig(datastore.DefaultPool),
		Notify:           true,
	}
}

// PoolConfig is kine's pool configuration for p.
func PoolConfig(p datastore.Pool) generic.ConnectionPoolConfig {
	idle := p.MaxIdle
	if idle == 0 {
		idle = -1 // kine: negative keeps none, zero its default
	}
	return generic.ConnectionPoolConfig{MaxOpen: p.MaxOpen, MaxIdle: idle, MaxIdleTime: p.IdleTime}
}

// MaxRequestBytes is the largest write kine takes in one message: an object
// (stored as JSON) of about this size. Larger ones answer 413.
const MaxRequestBytes = 2 << 20

// Kine is a running embedded kine.
type Kine struct {
	// Endpoint is the etcd client URL (unix://...).
	Endpoint string
	grpc     *grpc.Server
	cancel   context.CancelFunc
	wg       *sync.WaitGroup
	socket   string
	backend  kineserver.Backend
	bridge   *kineserver.KVServerBridge
	// fanout is the backend behind the bridge, whose watches share one
	// stream of the datastore's changes.
	fanout *fanout
	// rows is backend without the served defaults: what is stored.
	rows kineserver.Backend
	// Health says whether the datastore stores writes (/readyz).
	Health *Health
	// notifyCounts count what the PostgreSQL listener did (tests).
	notifyCounts
}

// DeleteKey deletes one key through kine's log, so watchers see it, if its
// current revision is still revision. It reports whether it deleted.
func (k *Kine) DeleteKey(ctx context.Context, key string, revision int64) (bool, error) {
	_, _, deleted, err := k.backend.Delete(ctx, key, revision)
	return deleted, err
}

// CreateKey creates key with value through kine's log (watchers see it, as
// they see the API server's writes) and returns its revision; exists
// reports a key that is already live (nothing written). The value must be
// what the API server would store there (JSON of the object, without a
// resourceVersion); it is for the server's own writes of objects it fully
// decides (the workspace controller's bootstrap of a new logical cluster).
func (k *Kine) CreateKey(ctx context.Context, key string, value []byte) (revision int64, exists bool, err error) {
	rev, err := k.backend.Create(ctx, key, value, 0)
	if err == kineserver.ErrKeyExists {
		return 0, true, nil
	}
	return rev, false, err
}

// GetKey reads the current value and revision of key (nil and 0 when it
// is absent), served defaults included.
func (k *Kine) GetKey(ctx context.Context, key string) ([]byte, int64, error) {
	_, kv, err := k.backend.Get(ctx, key, 0, false)
	if err != nil || kv == nil {
		return nil, 0, err
	}
	return kv.Value, kv.ModRevision, nil
}

// UpdateKey replaces key's value if its revision is still revision, through
// kine's log, and returns the new revision; updated is false (nothing
// written) when the key changed or is gone since. The same rules as
// CreateKey apply to value.
func (k *Kine) UpdateKey(ctx context.Context, key string, value []byte, revision int64) (int64, bool, error) {
	rev, _, updated, err := k.backend.Update(ctx, key, value, revision, 0)
	return rev, updated, err
}

// CreateRow, UpdateRow and DeleteRow write the stored row of a key as a
// restore of the change history brings it back (storage/restore): through
// kine's log, so watchers see each as an event, on the rows below the
// served defaults (a restored row is what was stored, a tombstone
// included), each checked against the key's current revision (false:
// nothing written). The value must be a row kine stored before. They are
// background writes: they yield to every other write (Background).
func (k *Kine) CreateRow(ctx context.Context, key string, value []byte) (bool, error) {
	_, err := k.rows.Create(Background(ctx), key, value, 0)
	if err == kineserver.ErrKeyExists {
		return false, nil
	}
	return err == nil, err
}

// UpdateRow: see CreateRow.
func (k *Kine) UpdateRow(ctx context.Context, key string, value []byte, revision int64) (bool, error) {
	_, _, updated, err := k.rows.Update(Background(ctx), key, value, revision, 0)
	return updated, err
}

// DeleteRow: see CreateRow.
func (k *Kine) DeleteRow(ctx context.Context, key string, revision int64) (bool, error) {
	_, _, deleted, err := k.rows.Delete(Background(ctx), key, revision)
	return deleted, err
}

// Background runs f, which writes kcp's own tables in the datastore (not
// kine's), as a background write: on SQLite on kine's one writer, so
// that it neither waits in SQLite's busy handler nor makes kine's writes
// wait there, and after the writes of the API that wait; on PostgreSQL
// with the other background writes' bound. Keep f short (one
// transaction of a page of rows).
func (k *Kine) Background(ctx context.Context, f func(context.Context) error) error {
	c, ok := k.rows.(checkedWrites)
	if !ok {
		return f(ctx)
	}
	var err error
	c.run(Background(ctx), func(ctx context.Context) { err = f(ctx) })
	return err
}

// Range calls fn with every live key below prefix, its value and its
// revision, in key order, as of one revision of the datastore, which it
// returns. It reads with kine's streaming list, as the API server's
// unpaged lists do: no message or slice holds the whole range. It is for
// the server's own caches of its own resources, which need a few fields of
// every object and can skip the API server's decoding of whole objects.
func (k *Kine) Range(ctx context.Context, prefix string, fn func(key string, value []byte, revision int64) error) (int64, error) {
	return rangeOf(ctx, k.backend, prefix, fn)
}

// ListObjects lists every live key below prefix (which ends in "/") at
// the current revision, served defaults as objects (serveddefaults'
// ListObjects); ok is false when no default is served there.
func (k *Kine) ListObjects(ctx context.Context, prefix string) (rev int64, items []serveddefaults.Item, ok bool, err error) {
	sd, isServed := k.backend.(*serveddefaults.Backend)
	if !isServed || !strings.HasSuffix(prefix, "/") {
		return 0, nil, false, nil
	}
	return sd.ListObjects(ctx, prefix, prefixEnd(prefix))
}

// prefixEnd is the end of the range of keys below prefix, which ends in
// "/": the range ends before "0".
func prefixEnd(prefix string) string {
	end := []byte(prefix)
	end[len(end)-1]++
	return string(end)
}

// RangeRows is Range over what is stored: without the defaults
// storage/serveddefaults serves and without the tombstones of deleted
// ones. It is for caches that keep only objects a served default never is
// (the garbage collector keeps objects with owners or finalizers).
func (k *Kine) RangeRows(ctx context.Context, prefix string, fn func(key string, value []byte, revision int64) error) (int64, error) {
	return rangeOf(ctx, k.rows, prefix, func(key string, value []byte, revision int64) error {
		if serveddefaults.IsTombstone(value) {
			return nil
		}
		return fn(key, value, revision)
	})
}

// RangeChanged is Range over what is stored, the tombstones of deleted
// served defaults included (serveddefaults.IsTombstone): of the served
// defaults, only those that were changed or deleted. A reader that must
// find those (the namespace defaults controller) reads them without every
// namespace's default.
func (k *Kine) RangeChanged(ctx context.Context, prefix string, fn func(key string, value []byte, revision int64) error) (int64, error) {
	return rangeOf(ctx, k.rows, prefix, fn)
}

func rangeOf(ctx context.Context, backend kineserver.Backend, prefix string, fn func(key string, value []byte, revision int64) error) (int64, error) {
	if !strings.HasSuffix(prefix, "/") {
		return 0, fmt.Errorf("range %q: a prefix ends in /", prefix)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lr := backend.ListStream(ctx, prefix, prefixEnd(prefix), 0, 0, false)
	var failed error
	for kv := range lr.KVc {
		if failed == nil {
			failed = fn(kv.Key, kv.Value, kv.ModRevision)
			if failed != nil {
				cancel() // the stream ends; drain what it already queued
			}
		}
	}
	if err := <-lr.Errorc; err != nil && failed == nil {
		return 0, err
	}
	if failed != nil {
		return 0, failed
	}
	return lr.CurrentRevision, nil
}

// HandedRevision is the newest revision kine has handed its watches (kine
// keeps it in memory), or 0 if it cannot tell.
func (k *Kine) HandedRevision() uint64 {
	r, err := k.backend.CurrentRevision(context.Background())
	if err != nil || r < 0 {
		return 0
	}
	return uint64(r)
}

func init() {
	// kine logs through logrus; keep its chatter out of the way, never let
	// it print an object or flood the log (kinelog.go), but make its fatal
	// paths loud: they would otherwise exit the server without a word in
	// kcp's own log.
	logrus.SetLevel(logrus.WarnLevel)
	takeOverKineLog()
	logrus.StandardLogger().ExitFunc = func(code int) {
		klog.ErrorS(nil, "the embedded kine storage layer hit a fatal error (see the kine message above); kcp stops", "exitCode", code)
		klog.Flush()
		os.Exit(code)
	}
}

// startBackend starts kine's backend. kine v0.17.5 creates its
// compact_rev_key row the first time it starts on a database, after looking
// for it outside any lock: replicas starting together on a new database
// all create it, and every one but the first fails to start with
// AlreadyExists ("duplicate key given in txn request"). The row is then
// the first one's, committed, so starting again finds it (nothing else of
// kine has started by then: the row is the first thing its log does).
func startBackend(ctx context.Context, backend kineserver.Backend) error {
	err := backend.Start(ctx)
	if errors.Is(err, kineserver.ErrKeyExists) {
		klog.InfoS("kine's first start raced another replica's; starting again", "err", err)
		err = backend.Start(ctx)
	}
	return err
}

// Start opens the datastore through kine and serves the etcd API on a unix
// socket. The schema must already be migrated. KINE_SCHEMA_MIGRATION is
// removed from the environment: kine's own ALTERs break on our generated column.
func Start(cfg Config) (*Kine, error) {
	os.Unsetenv("KINE_SCHEMA_MIGRATION")
	ctx, cancel := context.WithCancel(context.Background())
	wg := &sync.WaitGroup{}
	_, backend, err := drivers.New(ctx, wg, &drivers.Config{
		Endpoint:             cfg.Datastore.KineEndpoint(),
		ConnectionPoolConfig: cfg.Pool,
		CompactInterval:      cfg.CompactInterval,
		CompactTimeout:       cfg.CompactTimeout,
		CompactMinRetain:     cfg.CompactMinRetain,
		CompactBatchSize:     cfg.CompactBatchSize,
		PollBatchSize:        cfg.PollBatchSize,
		PollInterval:         cfg.PollInterval,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opening datastore %s: %v", cfg.Datastore, err)
	}
	if err := startBackend(ctx, backend); err != nil {
		cancel()
		return nil, fmt.Errorf("starting kine on datastore %s: %v", cfg.Datastore, err)
	}
	health := &Health{backend: backend}
	if cfg.Datastore.Dialect == datastore.SQLite {
		health.dataDir = filepath.Dir(cfg.Datastore.Path)
	}
	checked := checkedWrites{Backend: backend, health: health}
	if cfg.DB != nil {
		checked.rowAt = rowAt(cfg.DB, cfg.Datastore.Dialect)
		checked.createdRow = createdRow(cfg.DB, cfg.Datastore.Dialect)
	}
	if cfg.Datastore.Dialect == datastore.SQLite {
		checked.serial = newSerialWriter(ctx)
	} else if n := maxWriters(cfg.Pool.MaxOpen); n > 0 {
		checked.writers = make(chan struct{}, n)
	}
	if checked.serial == nil {
		checked.background = make(chan struct{}, backgroundWriters)
	}
	notify, writer := cfg.Notify && cfg.Datastore.Dialect == datastore.Postgres, ""
	if notify && cfg.DB != nil {
		writer = writerName()
		checked.notify = newNotifier(ctx, wg, cfg.DB, writer)
	}
	backend = checked
	rows := backend
	if cfg.ServedDefaultsCA != "" {
		backend = serveddefaults.New(backend, cfg.ServedDefaultsCA)
	}
	socket := SocketPath(cfg.SocketDir)
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		cancel()
		return nil, fmt.Errorf("removing stale kine socket %s: %v", socket, err)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listening on kine socket %s: %v", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		lis.Close()
		cancel()
		return nil, err
	}
	// All of the server's stores share one client connection (clusterstore),
	// which pings when idle for 30 s; gRPC's default policy (one ping per
	// 5 minutes) would answer with GOAWAY and break every watch at once.
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxRequestBytes), grpc.MaxSendMsgSize(1<<31 - 1),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})}
	gs := grpc.NewServer(opts...)
	fan := newFanout(backend)
	bridge := kineserver.New(fan, "unix", cfg.NotifyInterval, cfg.EmulatedVersion)
	bridge.Register(gs)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := gs.Serve(lis); err != nil {
			klog.ErrorS(err, "kine gRPC server stopped")
		}
	}()
	k := &Kine{Endpoint: "unix://" + socket, grpc: gs, cancel: cancel, wg: wg, socket: socket, backend: backend, bridge: bridge, fanout: fan, rows: rows, Health: health}
	if notify {
		wg.Add(1)
		go func() { defer wg.Done(); k.listen(ctx, cfg.Datastore.URL.String(), writer) }()
	}
	return k, nil
}

// Stop stops serving, closes the database and waits for kine's goroutines.
func (k *Kine) Stop() {
	stopped := make(chan struct{})
	go func() { k.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		k.grpc.Stop()
	}
	k.cancel()
	done := make(chan struct{})
	go func() { k.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		klog.Warning("kine did not stop within 5s")
	}
	os.Remove(k.socket)
}

// SocketPath keeps the socket path within the 107-byte limit of unix sockets:
// a deep data directory gets a short, stable path in the temp dir instead.
func SocketPath(dir string) string {
	p := filepath.Join(dir, "kine.sock")
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if len(p) < 100 {
		return p
	}
	sum := sha256.Sum256([]byte(p))
	return filepath.Join(os.TempDir(), "kcp-kine-"+hex.EncodeToString(sum[:6])+".sock")
}
