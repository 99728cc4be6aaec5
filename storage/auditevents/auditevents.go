// Package auditevents is an upstream audit backend that writes audit events
// into the datastore's audit_events table, in batches off the request path,
// and prunes them by age. Which requests are audited, and at which stages,
// is the upstream audit policy's decision (--audit-policy-file).
package auditevents

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/storage/changehistory"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/retention"
)

const columns = "at, audit_id, stage, cluster, username, groups, verb, api_group, resource, subresource, namespace, name, code, request_uri"

var pruneSQL = map[datastore.Dialect]string{
	datastore.SQLite:   `DELETE FROM audit_events WHERE at < ?`,
	datastore.Postgres: `DELETE FROM audit_events WHERE at < $1`,
}

// row is one event, flattened at ProcessEvents time (events are reused by
// the caller after it returns).
type row []any

// Backend implements audit.Backend.
type Backend struct {
	db        *sql.DB
	dialect   datastore.Dialect
	clusterOf func(*auditinternal.Event) string
	retention time.Duration

	events  chan row
	wg      sync.WaitGroup
	dropped int
	mu      sync.Mutex
}

var _ audit.Backend = &Backend{}

// New returns a backend; clusterOf names the logical cluster of an event.
func New(db *sql.DB, d datastore.Dialect, clusterOf func(*auditinternal.Event) string, retention time.Duration) *Backend {
	return &Backend{db: db, dialect: d, clusterOf: clusterOf, retention: retention, events: make(chan row, 10000)}
}

func (b *Backend) String() string { return "datastore" }

// ProcessEvents queues events without blocking; when the queue is full,
// events are dropped and counted (requests are never slowed down).
func (b *Backend) ProcessEvents(events ...*auditinternal.Event) bool {
	ok := true
	for _, e := range events {
		r := row{changehistory.Timestamp(b.dialect, e.StageTimestamp.Time), string(e.AuditID), string(e.Stage),
			b.clusterOf(e), e.User.Username, strings.Join(e.User.Groups, ","), e.Verb}
		if ref := e.ObjectRef; ref != nil {
			r = append(r, ref.APIGroup, ref.Resource, ref.Subresource, ref.Namespace, ref.Name)
		} else {
			r = append(r, "", "", "", "", "")
		}
		code := 0
		if e.ResponseStatus != nil {
			code = int(e.ResponseStatus.Code)
		}
		r = append(r, code, e.RequestURI)
		select {
		case b.events <- r:
		default:
			b.mu.Lock()
			b.dropped++
			b.mu.Unlock()
			ok = false
		}
	}
	return ok
}

// Run starts the writer and the pruner.
func (b *Backend) Run(stopCh <-chan struct{}) error {
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.write(stopCh) }()
	if b.retention > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-stopCh; cancel() }()
		go b.prune(ctx)
	}
	return nil
}

// Shutdown waits until queued events are written.
func (b *Backend) Shutdown() { b.wg.Wait() }

func (b *Backend) write(stopCh <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var batch []row
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := b.insert(batch); err != nil {
			klog.ErrorS(err, "writing audit events to the datastore", "events", len(batch))
		}
		batch = batch[:0]
	}
	for {
		select {
		case r := <-b.events:
			batch = append(batch, r)
			if len(batch) >= 200 {
				flush()
			}
		case <-t.C:
			flush()
			b.mu.Lock()
			if b.dropped > 0 {
				klog.Warningf("dropped %d audit events: the datastore writer could not keep up", b.dropped)
				b.dropped = 0
			}
			b.mu.Unlock()
		case <-stopCh:
			for {
				select {
				case r := <-b.events:
					batch = append(batch, r)
				default:
					flush()
					return
				}
			}
		}
	}
}

func (b *Backend) insert(batch []row) error {
	const n = 14
	var sb strings.Builder
	sb.WriteString("INSERT INTO audit_events (" + columns + ") VALUES ")
	args := make([]any, 0, len(batch)*n)
	for i, r := range batch {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(")
		for j := 0; j < n; j++ {
			if j > 0 {
				sb.WriteString(", ")
			}
			if b.dialect == datastore.Postgres {
				fmt.Fprintf(&sb, "$%d", i*n+j+1)
			} else {
				sb.WriteString("?")
			}
		}
		sb.WriteString(")")
		args = append(args, r...)
	}
	_, err := b.db.Exec(sb.String(), args...)
	return err
}

func (b *Backend) prune(ctx context.Context) {
	retention.Keep(ctx, "audit_events", b.retention, func(ctx context.Context, before time.Time) (int64, error) {
		res, err := b.db.ExecContext(ctx, pruneSQL[b.dialect], changehistory.Timestamp(b.dialect, before))
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}
