package restore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"

	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

var (
	// The newest row of every key of a cluster written after a revision:
	// a live row is the key's value, a deleted one (kine writes a delete
	// as a row with deleted = 1) a deletion. Through the (cluster, name,
	// id) index.
	changedRowsSQL = map[datastore.Dialect]string{
		datastore.SQLite: `SELECT k.name, k.deleted, k.value FROM kine AS k
			WHERE k.cluster = ? AND k.id > ?
			AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
		datastore.Postgres: `SELECT k.name, k.deleted, k.value FROM kine AS k
			WHERE k.cluster = $1 AND k.id > $2
			AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
	}
	// kine's own record of how far it compacted (kine's CompactRevSQL).
	compactRevisionSQL = `SELECT MAX(prev_revision) FROM kine WHERE name = 'compact_rev_key'`
	keyRowSQL          = map[datastore.Dialect]string{
		datastore.SQLite:   `SELECT id, deleted, value FROM kine WHERE name = ? ORDER BY id DESC LIMIT 1`,
		datastore.Postgres: `SELECT id, deleted, value FROM kine WHERE name = $1 ORDER BY id DESC LIMIT 1`,
	}
)

// Delta is what changed in a cluster after a revision: the keys written
// since, with their values now, and the keys deleted since.
type Delta struct {
	Changed map[string][]byte
	Deleted []string
}

// ErrCompactedSince is Changed's answer when kine's compaction passed the
// revision asked for: it removes deleted rows up to where it compacted, so
// a deletion after the revision may be gone from the log and only a
// comparison of whole states finds it.
type ErrCompactedSince struct{ Since, Compacted int64 }

func (e *ErrCompactedSince) Error() string {
	return fmt.Sprintf("kine compacted the log to revision %d, past revision %d: a deletion since may be gone from it", e.Compacted, e.Since)
}

// Changed reads what changed in cluster c after revision since. The
// caller must know every row up to since is final (embeddedkine's
// Settle), or rows committed late with smaller ids are missed. It refuses
// with ErrCompactedSince when compaction may have hidden a deletion
// (checked after the read: compaction only moves forward).
func (s Source) Changed(ctx context.Context, c logicalcluster.Name, since int64) (*Delta, error) {
	d := &Delta{Changed: map[string][]byte{}}
	rows, err := s.DB.QueryContext(ctx, changedRowsSQL[s.Dialect], string(c), since)
	if err != nil {
		return nil, fmt.Errorf("reading the changes of %s since revision %d: %w", c, since, err)
	}
	for rows.Next() {
		var key string
		var deleted int64
		var value []byte
		if err := rows.Scan(&key, &deleted, &value); err != nil {
			rows.Close()
			return nil, err
		}
		if deleted != 0 {
			d.Deleted = append(d.Deleted, key)
		} else {
			d.Changed[key] = value
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	compacted, err := s.CompactRevision(ctx)
	if err != nil {
		return nil, err
	}
	if compacted > since {
		return nil, &ErrCompactedSince{Since: since, Compacted: compacted}
	}
	sort.Strings(d.Deleted)
	return d, nil
}

// CompactRevision is how far kine compacted the log (0: never).
func (s Source) CompactRevision(ctx context.Context) (int64, error) {
	var rev sql.NullInt64
	if err := s.DB.QueryRowContext(ctx, compactRevisionSQL).Scan(&rev); err != nil {
		return 0, fmt.Errorf("reading kine's compact revision: %w", err)
	}
	return rev.Int64, nil
}

// liveOf reads the live rows of some keys, one indexed read each.
func (s Source) liveOf(ctx context.Context, keys []string) (map[string]live, error) {
	out := map[string]live{}
	for _, key := range keys {
		var l live
		var deleted int64
		err := s.DB.QueryRowContext(ctx, keyRowSQL[s.Dialect], key).Scan(&l.rev, &deleted, &l.value)
		if err == sql.ErrNoRows {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", key, err)
		}
		if deleted == 0 {
			out[key] = l
		}
	}
	return out, nil
}

// manyKeys: above this many keys one read of the cluster's rows is
// cheaper than a read per key.
const manyKeys = 2000

// PlanDelta computes the writes that apply a Delta of cluster c (keys of
// c, as stored) to this datastore's copy of c, reading only the keys the
// delta names (the copy holds the state the delta starts from). Like
// PlanInto it leaves the LogicalCluster, child workspaces and Events alone.
func (s Source) PlanDelta(ctx context.Context, c logicalcluster.Name, d *Delta) (*Plan, error) {
	want := map[string][]byte{}
	var keys []string
	for key, v := range d.Changed {
		if ClusterOfKey(key) == string(c) && !skipped(c, key) {
			want[key] = v
			keys = append(keys, key)
		}
	}
	gone := map[string]bool{}
	for _, key := range d.Deleted {
		if _, ok := want[key]; !ok && ClusterOfKey(key) == string(c) && !skipped(c, key) {
			gone[key] = true
			keys = append(keys, key)
		}
	}
	var lives map[string]live
	var err error
	if len(keys) > manyKeys {
		lives, err = s.Live(ctx, c)
	} else {
		lives, err = s.liveOf(ctx, keys)
	}
	if err != nil {
		return nil, err
	}
	plan := &Plan{Cluster: c}
	plan.writeWanted(want, lives)
	for key := range gone {
		if l, isLive := lives[key]; isLive {
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Delete, Revision: l.rev})
		}
	}
	order(plan.Changes)
	return plan, nil
}

// IsCompactedSince reports whether err is an ErrCompactedSince.
func IsCompactedSince(err error) bool {
	var c *ErrCompactedSince
	return errors.As(err, &c)
}
