// Package changehistory switches the opt-in change history on or off and
// keeps it within its retention. The history itself is written by a trigger
// on kine's table (migrations: kcp_changes, kcp_settings); this package only
// writes those two tables of ours, never kine's.
package changehistory

import (
	"context"
	"database/sql"
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
func Configure(ctx context.Context, db *sql.DB, d datastore.Dialect, on bool) error {
	value := "off"
	if on {
		value = "on"
	}
	_, err := db.ExecContext(ctx, setSQL[d], value)
	return err
}

// Prune deletes history older than before and reports how many rows went.
func Prune(ctx context.Context, db *sql.DB, d datastore.Dialect, before time.Time) (int64, error) {
	res, err := db.ExecContext(ctx, pruneSQL[d], Timestamp(d, before))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// KeepWithin prunes history older than retention until ctx ends.
func KeepWithin(ctx context.Context, db *sql.DB, d datastore.Dialect, retention time.Duration) {
	keep.Keep(ctx, "kcp_changes", retention, func(ctx context.Context, before time.Time) (int64, error) {
		return Prune(ctx, db, d, before)
	})
}
