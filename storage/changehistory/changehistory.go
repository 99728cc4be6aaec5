// Package changehistory switches the opt-in change history on or off and
// keeps it within its retention. The history itself is written by a trigger
// on kine's table (migrations: kcp_changes, kcp_settings); this package only
// writes those two tables of ours, never kine's.
package changehistory

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"github.com/kcpsql/kcp/storage/datastore"
	keep "github.com/kcpsql/kcp/storage/retention"
)

var (
	setSQL = map[datastore.Dialect]string{
		datastore.SQLite: `INSERT INTO kcp_settings (name, value) VALUES ('change_history', ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
		datastore.Postgres: `INSERT INTO kcp_settings (name, value) VALUES ('change_history', $1)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
	}
	putSQL = map[datastore.Dialect]string{
		datastore.SQLite: `INSERT INTO kcp_settings (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
		datastore.Postgres: `INSERT INTO kcp_settings (name, value) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
	}
	getSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `SELECT value FROM kcp_settings WHERE name = ?`,
		datastore.Postgres: `SELECT value FROM kcp_settings WHERE name = $1`,
	}
	unsetSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `DELETE FROM kcp_settings WHERE name = ?`,
		datastore.Postgres: `DELETE FROM kcp_settings WHERE name = $1`,
	}
	// Every row above the newest revision older than the cutoff stays:
	// what remains is every write after one revision.
	newestBeforeSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `SELECT MAX(revision) FROM kcp_changes WHERE changed_at < ?`,
		datastore.Postgres: `SELECT MAX(revision) FROM kcp_changes WHERE changed_at < $1`,
	}
	pruneSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `DELETE FROM kcp_changes WHERE changed_at < ?`,
		datastore.Postgres: `DELETE FROM kcp_changes WHERE changed_at < $1`,
	}
)

// Timestamp formats a time the way the dialect stores changed_at.
func Timestamp(d datastore.Dialect, t time.Time) any {
	if d == datastore.SQLite {
		return t.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	return t
}

// Configure turns recording on or off for every replica of the datastore.
// Switching it on records, as 'change_history_since', a revision from
// which every write is in the history (what a restore may reach back to);
// switching it off forgets it.
func Configure(ctx context.Context, db *sql.DB, d datastore.Dialect, on bool) error {
	was, err := setting(ctx, db, d, "change_history")
	if err != nil {
		return err
	}
	value := "off"
	if on {
		value = "on"
	}
	if _, err := db.ExecContext(ctx, setSQL[d], value); err != nil {
		return err
	}
	if !on {
		_, err := db.ExecContext(ctx, unsetSQL[d], "change_history_since")
		return err
	}
	since, err := setting(ctx, db, d, "change_history_since")
	if err != nil || (was == "on" && since != "") {
		return err
	}
	// A write whose statement began before the switch was committed is
	// not recorded; its revision is at most the newest one once those
	// statements are done (they are single inserts, so a moment is
	// enough). Everything above that revision is recorded.
	select {
	case <-time.After(switchSettle):
	case <-ctx.Done():
		return ctx.Err()
	}
	var newest int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM kine`).Scan(&newest); err != nil {
		return err
	}
	return put(ctx, db, d, "change_history_since", strconv.FormatInt(newest, 10))
}

// switchSettle is how long Configure waits after switching recording on
// before it reads the revision from which every write is recorded.
var switchSettle = 500 * time.Millisecond

// Prune deletes history older than before and reports how many rows went.
// It records the newest revision it deleted ('change_history_pruned_to'):
// a restore cannot reach back past it.
func Prune(ctx context.Context, db *sql.DB, d datastore.Dialect, before time.Time) (int64, error) {
	var newest sql.NullInt64
	if err := db.QueryRowContext(ctx, newestBeforeSQL[d], Timestamp(d, before)).Scan(&newest); err != nil {
		return 0, err
	}
	if !newest.Valid {
		return 0, nil
	}
	// Recorded first: a crash between the two leaves coverage too short,
	// never too long.
	prunedTo, err := setting(ctx, db, d, "change_history_pruned_to")
	if err != nil {
		return 0, err
	}
	if old, _ := strconv.ParseInt(prunedTo, 10, 64); newest.Int64 > old {
		if err := put(ctx, db, d, "change_history_pruned_to", strconv.FormatInt(newest.Int64, 10)); err != nil {
			return 0, err
		}
	}
	res, err := db.ExecContext(ctx, pruneSQL[d], Timestamp(d, before))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Coverage is how far back the history reaches: every write with a
// revision above From is recorded, with the object before and after it.
type Coverage struct {
	// On reports whether recording is on.
	On bool
	// From is the newest revision whose writes may be missing (switched
	// on after it, or pruned up to it).
	From int64
}

// Covered reads the history's coverage.
func Covered(ctx context.Context, db *sql.DB, d datastore.Dialect) (Coverage, error) {
	on, err := setting(ctx, db, d, "change_history")
	if err != nil || on != "on" {
		return Coverage{}, err
	}
	since, err := setting(ctx, db, d, "change_history_since")
	if err != nil {
		return Coverage{}, err
	}
	if since == "" {
		return Coverage{}, nil
	}
	pruned, err := setting(ctx, db, d, "change_history_pruned_to")
	if err != nil {
		return Coverage{}, err
	}
	from, _ := strconv.ParseInt(since, 10, 64)
	if p, _ := strconv.ParseInt(pruned, 10, 64); p > from {
		from = p
	}
	return Coverage{On: true, From: from}, nil
}

func setting(ctx context.Context, db *sql.DB, d datastore.Dialect, name string) (string, error) {
	var v string
	err := db.QueryRowContext(ctx, getSQL[d], name).Scan(&v)
	if err == sql.ErrNoRows {
		return "", nil
	}
	return v, err
}

func put(ctx context.Context, db *sql.DB, d datastore.Dialect, name, value string) error {
	_, err := db.ExecContext(ctx, putSQL[d], name, value)
	return err
}

// KeepWithin prunes history older than retention until ctx ends.
func KeepWithin(ctx context.Context, db *sql.DB, d datastore.Dialect, retention time.Duration) {
	keep.Keep(ctx, "kcp_changes", retention, func(ctx context.Context, before time.Time) (int64, error) {
		return Prune(ctx, db, d, before)
	})
}
