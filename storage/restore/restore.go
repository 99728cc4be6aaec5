// Package restore brings one logical cluster back to its state at an
// earlier revision, from the change history (kcp_changes, an undo log: each
// row holds the object before and after one write). The state of a key at
// revision R is the object before its first change after R, so a restore
// needs only the history written after R; keys not changed since R are not
// touched.
//
// A plan is computed with SQL reads of our table and of kine's (read only)
// and applied as writes through kine (Writer), each checked against the
// key's current revision, so watchers see every change as an event and
// resourceVersions only move forward (DESIGN.md rule 6). Applying is
// idempotent: a plan recomputed after a crash or a concurrent write is the
// rest of the work.
package restore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kcpsql/kcp/storage/changehistory"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Action is what a restore does to one key.
type Action string

const (
	Create Action = "create"
	Update Action = "update"
	Delete Action = "delete"
)

// Change is one write of a plan.
type Change struct {
	Key    string
	Action Action
	// Value is the object to store (create, update).
	Value []byte
	// Revision is the key's current revision (update, delete).
	Revision int64
	// stage orders writes: those of one stage are independent.
	stage int
}

// Plan is what a restore of Cluster to Revision writes.
type Plan struct {
	Cluster  logicalcluster.Name
	Revision int64
	Changes  []Change
}

// Refused is a restore the history cannot serve; Earliest is the oldest
// revision it can restore to (0 when none).
type Refused struct {
	Reason       string
	Earliest     int64
	EarliestTime time.Time
}

func (r *Refused) Error() string {
	if r.Earliest == 0 {
		return r.Reason
	}
	at := ""
	if !r.EarliestTime.IsZero() {
		at = " (" + r.EarliestTime.UTC().Format(time.RFC3339) + ")"
	}
	return fmt.Sprintf("%s; the earliest point it can restore to is revision %d%s", r.Reason, r.Earliest, at)
}

// IsRefused reports whether err is a Refused.
func IsRefused(err error) bool {
	var r *Refused
	return errors.As(err, &r)
}

// Source reads what a plan needs from the datastore.
type Source struct {
	DB      *sql.DB
	Dialect datastore.Dialect
	// Background runs writes to kcp's own tables (snapshots) as background
	// writes of the datastore (nil: directly).
	Background func(ctx context.Context, f func(context.Context) error) error
}

var (
	firstChangesSQL = map[datastore.Dialect]string{
		datastore.SQLite: `SELECT c.key, c.revision, c.operation, c.prev_revision, c.old_object
			FROM kcp_changes AS c
			JOIN (SELECT key, MIN(revision) AS first FROM kcp_changes WHERE cluster = ? AND revision > ? GROUP BY key) AS f
			ON c.key = f.key AND c.revision = f.first
			WHERE c.cluster = ?`,
		datastore.Postgres: `SELECT c.key, c.revision, c.operation, c.prev_revision, c.old_object
			FROM kcp_changes AS c
			JOIN (SELECT key, MIN(revision) AS first FROM kcp_changes WHERE cluster = $1 AND revision > $2 GROUP BY key) AS f
			ON c.key = f.key AND c.revision = f.first
			WHERE c.cluster = $3`,
	}
	liveRowsSQL = map[datastore.Dialect]string{
		datastore.SQLite: `SELECT k.name, k.id, k.value FROM kine AS k
			WHERE k.cluster = ? AND k.deleted = 0
			AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
		datastore.Postgres: `SELECT k.name, k.id, k.value FROM kine AS k
			WHERE k.cluster = $1 AND k.deleted = 0
			AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
	}
	createdSQL = map[datastore.Dialect]string{
		datastore.SQLite: `SELECT CASE WHEN created <> 0 THEN id ELSE create_revision END, deleted FROM kine
			WHERE name = ? ORDER BY id DESC LIMIT 1`,
		datastore.Postgres: `SELECT CASE WHEN created <> 0 THEN id ELSE create_revision END, deleted FROM kine
			WHERE name = $1 ORDER BY id DESC LIMIT 1`,
	}
	revisionAtSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `SELECT MAX(revision) FROM kcp_changes WHERE changed_at <= ?`,
		datastore.Postgres: `SELECT MAX(revision) FROM kcp_changes WHERE changed_at <= $1`,
	}
	timeOfSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `SELECT changed_at FROM kcp_changes WHERE revision >= ? ORDER BY revision LIMIT 1`,
		datastore.Postgres: `SELECT changed_at FROM kcp_changes WHERE revision >= $1 ORDER BY revision LIMIT 1`,
	}
)

// LogicalClusterKey is the key of a cluster's LogicalCluster: its identity,
// never restored.
func LogicalClusterKey(c logicalcluster.Name) string {
	return "/registry/tenancy.kcp.io/logicalclusters/" + string(c) + "/cluster"
}

// skipped are keys a restore leaves as they are: the cluster's identity
// (its LogicalCluster, which also carries the freeze), its child
// workspaces (each is restored by a restore of its own), and its Events
// (both APIs store them under core): they are history, not state (as for
// kcp export), and recorders keep updating them while a restore runs.
func skipped(c logicalcluster.Name, key string) bool {
	return key == LogicalClusterKey(c) || strings.HasPrefix(key, "/registry/tenancy.kcp.io/workspaces/"+string(c)+"/") ||
		strings.HasPrefix(key, "/registry/core/events/"+string(c)+"/")
}

// Began is the revision that created the cluster's current incarnation
// (its LogicalCluster); 0 when the cluster does not exist.
func (s Source) Began(ctx context.Context, c logicalcluster.Name) (int64, error) {
	var created, deleted int64
	err := s.DB.QueryRowContext(ctx, createdSQL[s.Dialect], LogicalClusterKey(c)).Scan(&created, &deleted)
	if err == sql.ErrNoRows || (err == nil && deleted != 0) {
		return 0, nil
	}
	return created, err
}

// Below is every existing logical cluster below c (its child workspaces'
// clusters, theirs, and so on), parents first.
func (s Source) Below(ctx context.Context, c logicalcluster.Name) ([]logicalcluster.Name, error) {
	q := `SELECT k.name FROM kine AS k WHERE k.name LIKE ? AND k.deleted = 0
		AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.name = k.name) ORDER BY k.name`
	if s.Dialect == datastore.Postgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	rows, err := s.DB.QueryContext(ctx, q, "/registry/tenancy.kcp.io/logicalclusters/"+string(c)+":%/cluster")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []logicalcluster.Name
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, err
		}
		out = append(out, logicalcluster.Name(ClusterOfKey(key)))
	}
	return out, rows.Err()
}

// RevisionAt is the newest revision written at or before t.
func (s Source) RevisionAt(ctx context.Context, t time.Time) (int64, bool, error) {
	var rev sql.NullInt64
	if err := s.DB.QueryRowContext(ctx, revisionAtSQL[s.Dialect], changehistory.Timestamp(s.Dialect, t)).Scan(&rev); err != nil {
		return 0, false, err
	}
	return rev.Int64, rev.Valid, nil
}

// TimeOf is when the first recorded write at or after rev happened (zero
// when none is recorded).
func (s Source) TimeOf(ctx context.Context, rev int64) time.Time {
	var at any
	if err := s.DB.QueryRowContext(ctx, timeOfSQL[s.Dialect], rev).Scan(&at); err != nil {
		return time.Time{}
	}
	switch v := at.(type) {
	case time.Time:
		return v
	case string:
		t, _ := time.Parse("2006-01-02T15:04:05.000Z", v)
		return t
	case []byte:
		t, _ := time.Parse("2006-01-02T15:04:05.000Z", string(v))
		return t
	}
	return time.Time{}
}

// Earliest is the oldest revision cluster c can be restored to, and why
// not older; 0 when the history cannot restore it at all.
func (s Source) Earliest(ctx context.Context, c logicalcluster.Name) (int64, string, error) {
	cov, err := changehistory.Covered(ctx, s.DB, s.Dialect)
	if err != nil {
		return 0, "", err
	}
	if !cov.On {
		return 0, "the change history is off (kcp start --change-history records it)", nil
	}
	began, err := s.Began(ctx, c)
	if err != nil {
		return 0, "", err
	}
	if began == 0 {
		return 0, fmt.Sprintf("logical cluster %s does not exist", c), nil
	}
	if began > cov.From {
		return began, fmt.Sprintf("%s was created at revision %d (an earlier workspace of the same name is not restorable into it)", c, began), nil
	}
	return cov.From, fmt.Sprintf("the change history reaches back to revision %d (recorded since then, older history pruned by --change-history-retention)", cov.From), nil
}

// Check refuses a restore of c to rev that the history cannot serve.
func (s Source) Check(ctx context.Context, c logicalcluster.Name, rev int64) error {
	earliest, why, err := s.Earliest(ctx, c)
	if err != nil {
		return err
	}
	if earliest == 0 {
		return &Refused{Reason: "cannot restore " + string(c) + ": " + why}
	}
	if rev < earliest {
		return &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: %s", c, rev, why), Earliest: earliest, EarliestTime: s.TimeOf(ctx, earliest)}
	}
	return nil
}

type live struct {
	rev   int64
	value []byte
}

// writeWanted adds a create for every key of want that is not live and an
// update for every one whose live value differs.
func (p *Plan) writeWanted(want map[string][]byte, lives map[string]live) {
	for key, v := range want {
		l, isLive := lives[key]
		switch {
		case !isLive:
			p.Changes = append(p.Changes, Change{Key: key, Action: Create, Value: v})
		case !bytes.Equal(l.value, v):
			p.Changes = append(p.Changes, Change{Key: key, Action: Update, Value: v, Revision: l.rev})
		}
	}
}

type first struct {
	rev, prev int64
	op        string
	old       []byte
}

// PlanTo computes what restoring c to revision rev writes. It refuses
// (Refused) when the history misses a change after rev.
func (s Source) PlanTo(ctx context.Context, c logicalcluster.Name, rev int64) (*Plan, error) {
	if err := s.Check(ctx, c, rev); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		plan, again, err := s.planOnce(ctx, c, rev)
		if err != nil || !again {
			return plan, err
		}
		if attempt == 4 {
			return nil, fmt.Errorf("%s kept changing while its restore was planned", c)
		}
	}
}

// planOnce plans from one read of the history and one of the live rows;
// again reports a write between the two reads (plan again).
func (s Source) planOnce(ctx context.Context, c logicalcluster.Name, rev int64) (*Plan, bool, error) {
	// History first, live rows second: a write between the two reads is
	// in both or only in the live rows, which the checks below tell.
	firsts, lives, err := s.read(ctx, c, rev)
	if err != nil {
		return nil, false, err
	}
	plan := &Plan{Cluster: c, Revision: rev}
	incomplete := func(key, why string) error {
		return &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: the change history misses a change of %s (%s); it was off or pruned after that revision", c, rev, key, why)}
	}
	for key, f := range firsts {
		if skipped(c, key) {
			continue
		}
		l, isLive := lives[key]
		if f.prev < 0 || f.prev > rev {
			return nil, false, incomplete(key, fmt.Sprintf("its first recorded change after %d, at %d, follows one at %d", rev, f.rev, f.prev))
		}
		var want []byte
		if f.op != "create" {
			if f.old == nil {
				return nil, false, incomplete(key, "no earlier object recorded")
			}
			want = f.old
		}
		switch {
		case want == nil && isLive:
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Delete, Revision: l.rev})
		case want != nil && !isLive:
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Create, Value: want})
		case want != nil && isLive && !bytes.Equal(want, l.value):
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Update, Value: want, Revision: l.rev})
		}
	}
	for key, l := range lives {
		if _, ok := firsts[key]; !ok && l.rev > rev && !skipped(c, key) {
			// Written after the history was read, or never recorded.
			if err := s.recordedSince(ctx, c, key, rev); err != nil {
				return nil, false, err
			}
			return nil, true, nil
		}
	}
	order(plan.Changes)
	return plan, false, nil
}

// recordedSince tells a key written after the history was read (recorded
// now) from one whose change was never recorded.
func (s Source) recordedSince(ctx context.Context, c logicalcluster.Name, key string, rev int64) error {
	q := `SELECT COUNT(*) FROM kcp_changes WHERE cluster = ? AND key = ? AND revision > ?`
	if s.Dialect == datastore.Postgres {
		q = `SELECT COUNT(*) FROM kcp_changes WHERE cluster = $1 AND key = $2 AND revision > $3`
	}
	var n int
	if err := s.DB.QueryRowContext(ctx, q, string(c), key, rev).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: %s was changed after it and the change history has no record of it (recording was off)", c, rev, key)}
	}
	return nil
}

// StateAt is every stored row of c as it was at revision rev (keys of
// c, values as stored), from the live rows and the history after rev.
func (s Source) StateAt(ctx context.Context, c logicalcluster.Name, rev int64) (map[string][]byte, error) {
	if err := s.Check(ctx, c, rev); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		firsts, lives, err := s.read(ctx, c, rev)
		if err != nil {
			return nil, err
		}
		state := map[string][]byte{}
		again := false
		for key, l := range lives {
			if skipped(c, key) {
				continue
			}
			if _, changed := firsts[key]; !changed {
				if l.rev > rev {
					if err := s.recordedSince(ctx, c, key, rev); err != nil {
						return nil, err
					}
					again = true
					break
				}
				state[key] = l.value
			}
		}
		if again {
			continue
		}
		for key, f := range firsts {
			if skipped(c, key) {
				continue
			}
			if f.prev < 0 || f.prev > rev {
				return nil, &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: the change history misses a change of %s; it was off or pruned after that revision", c, rev, key)}
			}
			if f.op != "create" {
				if f.old == nil {
					return nil, &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: no earlier object of %s is recorded", c, rev, key)}
				}
				state[key] = f.old
			}
		}
		return state, nil
	}
	return nil, fmt.Errorf("%s kept changing while its state was read", c)
}

// read is one read of the history after rev and one of the live rows.
func (s Source) read(ctx context.Context, c logicalcluster.Name, rev int64) (map[string]first, map[string]live, error) {
	firsts := map[string]first{}
	rows, err := s.DB.QueryContext(ctx, firstChangesSQL[s.Dialect], string(c), rev, string(c))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the change history of %s: %w", c, err)
	}
	for rows.Next() {
		var key, op string
		var r int64
		var prev sql.NullInt64
		var old []byte
		if err := rows.Scan(&key, &r, &op, &prev, &old); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if !prev.Valid {
			prev.Int64 = -1
		}
		firsts[key] = first{rev: r, prev: prev.Int64, op: op, old: old}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	lives, err := s.Live(ctx, c)
	return firsts, lives, err
}

// Live is every live row of c.
func (s Source) Live(ctx context.Context, c logicalcluster.Name) (map[string]live, error) {
	lives := map[string]live{}
	rows, err := s.DB.QueryContext(ctx, liveRowsSQL[s.Dialect], string(c))
	if err != nil {
		return nil, fmt.Errorf("reading the objects of %s: %w", c, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var l live
		if err := rows.Scan(&key, &l.rev, &l.value); err != nil {
			return nil, err
		}
		lives[key] = l
	}
	return lives, rows.Err()
}

// Values are the stored rows of Live, key to value (a whole cluster's
// state, as PlanInto takes it).
func Values(lives map[string]live) map[string][]byte {
	out := make(map[string][]byte, len(lives))
	for k, l := range lives {
		out[k] = l.value
	}
	return out
}
