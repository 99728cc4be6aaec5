package embeddedkine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/kcpsql/kcp/storage/datastore"
)

// KeyValue is a key and the value to create it with.
type KeyValue struct {
	Key   string
	Value []byte
}

// CreateKeys creates several keys in one transaction of the datastore: one
// commit (on PostgreSQL one turn of the commit order) for all of them
// instead of one each. If the first key is live, nothing is written and
// exists is true; a later key that is live is left as it is (its revision
// is 0 in revs). Every other key is created, each at its own revision, as
// kine's create would (the same row: a create over a deleted key's history
// names the deletion as its previous revision), and watchers see them as
// they see kine's writes. The rules of CreateKey apply to the values.
//
// It is for the server's own writes of a new logical cluster's objects (the
// workspace controller: its LogicalCluster first, then its namespaces). The
// first key decides because it says whose the rest is: the LogicalCluster
// of an earlier workspace of the same name must not get namespaces it does
// not have.
func (k *Kine) CreateKeys(ctx context.Context, kvs []KeyValue) (revs []int64, exists bool, err error) {
	if len(kvs) == 0 {
		return nil, false, nil
	}
	if k.createKeys == nil {
		// No connection of our own (tests of kine alone): one create
		// each.
		revs = make([]int64, len(kvs))
		for i, kv := range kvs {
			rev, live, err := k.CreateKey(ctx, kv.Key, kv.Value)
			if err != nil {
				return nil, false, err
			}
			if live && i == 0 {
				return nil, true, nil
			}
			revs[i] = rev
		}
		return revs, false, nil
	}
	revs, exists, err = k.createKeys(ctx, kvs)
	if err != nil || exists {
		return revs, exists, err
	}
	// kine's poller learns of new revisions from its own writes and lists;
	// these rows are neither (PostgreSQL's notification wakes it too, but
	// only where it listens).
	_, _, _ = k.backend.List(ctx, wakeKey, "", 1, 0, true)
	return revs, false, nil
}

// createKeysIn returns CreateKeys' transaction on db, run as one write of
// b (on SQLite's serial writer: kine's own writes wait for it, and it for
// them).
func createKeysIn(b checkedWrites, db *sql.DB, dialect datastore.Dialect) func(context.Context, []KeyValue) ([]int64, bool, error) {
	// The row kine's create inserts, under kine's condition: the key's
	// latest row is still prev (0: the key has none). create_revision and
	// old_value are NULL for a create, as in kine's own statement.
	insert := `INSERT INTO kine(name, created, deleted, create_revision, prev_revision, lease, value, old_value)
		SELECT ?, 1, 0, NULL, ?, 0, ?, NULL
		WHERE COALESCE((SELECT MAX(id) FROM kine WHERE name = ?), 0) = ?
		RETURNING id`
	latest := `SELECT id, deleted FROM kine WHERE name = ? ORDER BY id DESC LIMIT 1`
	if dialect == datastore.Postgres {
		insert = numbered(insert)
		latest = numbered(latest)
	}
	create := func(ctx context.Context, tx *sql.Tx, kv KeyValue) (rev int64, live bool, err error) {
		var prev int64
		for range 2 {
			err = tx.QueryRowContext(ctx, insert, kv.Key, prev, kv.Value, kv.Key, prev).Scan(&rev)
			if err == nil {
				return rev, false, nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return 0, false, err
			}
			// The key has rows: live, or deleted (then created over
			// its deletion, as kine does).
			var deleted bool
			if err := tx.QueryRowContext(ctx, latest, kv.Key).Scan(&prev, &deleted); err != nil {
				return 0, false, err
			}
			if !deleted {
				return 0, true, nil
			}
		}
		return 0, false, fmt.Errorf("create %s: the key changed while it was being created", kv.Key)
	}
	return func(ctx context.Context, kvs []KeyValue) (revs []int64, exists bool, err error) {
		b.write(ctx, func(ctx context.Context) {
			revs, exists, err = func() ([]int64, bool, error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return nil, false, err
				}
				defer tx.Rollback() //nolint:errcheck // after a commit, a no-op
				revs := make([]int64, len(kvs))
				for i, kv := range kvs {
					rev, live, err := create(ctx, tx, kv)
					if err != nil {
						return nil, false, err
					}
					if live && i == 0 {
						return nil, true, nil
					}
					revs[i] = rev
				}
				return revs, false, tx.Commit()
			}()
		})
		if err != nil {
			// A commit that reported failure may have stored the rows:
			// the caller looks again (the keys exist then), as after
			// any failed write.
			return nil, false, fmt.Errorf("creating %d keys from %s: %w", len(kvs), kvs[0].Key, err)
		}
		if !exists {
			b.health.succeeded()
		}
		return revs, exists, nil
	}
}

// numbered turns ? placeholders into PostgreSQL's $1, $2, ...
func numbered(q string) string {
	var out strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&out, "$%d", n)
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}
