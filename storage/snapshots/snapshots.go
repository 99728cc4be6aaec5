// Package snapshots keeps snapshots of one logical cluster at one
// revision in our own tables (kcp_snapshots, kcp_snapshot_rows): copies of
// kine's rows as stored, as of one revision (consistent), and read back by restores (storage/restore), which write
// through kine. It also reads and writes the portable snapshot file of
// `kcp snapshot` and `kcp restore --from`.
package snapshots

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kcpsql/kcp/storage/changehistory"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Snapshot is one stored snapshot.
type Snapshot struct {
	ID       int64
	Parent   string
	Name     string
	Cluster  logicalcluster.Name
	Revision int64
	TakenAt  time.Time
	Objects  int64
	Bytes    int64
}

// FileKind and FileVersion mark a snapshot file.
const (
	FileKind    = "KcpWorkspaceSnapshot"
	FileVersion = 1
)

// File is the portable snapshot: the rows of one cluster at one revision.
type File struct {
	Kind     string    `json:"kind"`
	Version  int       `json:"version"`
	Cluster  string    `json:"cluster"`
	Revision int64     `json:"revision"`
	TakenAt  time.Time `json:"takenAt"`
	Rows     []Row     `json:"rows"`
}

// Row is one stored object: its key and its value as stored (JSON).
type Row struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func q(d datastore.Dialect, s string) string {
	if d != datastore.Postgres {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// stateAt selects the rows of a cluster live at a revision, without its
// LogicalCluster and child Workspaces (a snapshot is of the workspace's
// own objects). Arguments: cluster, revision, LogicalCluster key,
// workspaces prefix pattern, revision.
const stateAt = `SELECT k.name, k.value FROM kine AS k
	WHERE k.cluster = ? AND k.deleted = 0 AND k.id <= ? AND k.name <> ? AND k.name NOT LIKE ?
	AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name AND l.id <= ?)`

func stateArgs(c logicalcluster.Name, rev int64) []any {
	return []any{string(c), rev, "/registry/tenancy.kcp.io/logicalclusters/" + string(c) + "/cluster",
		"/registry/tenancy.kcp.io/workspaces/" + string(c) + "/%", rev}
}

// Runner runs f, a write to kcp's own tables, as a background write of
// the datastore (embeddedkine's Kine.Background: on SQLite on kine's one
// writer, after every waiting write of the API); nil runs f directly.
type Runner func(ctx context.Context, f func(context.Context) error) error

func run(ctx context.Context, bg Runner, f func(context.Context) error) error {
	if bg == nil {
		return f(ctx)
	}
	return bg(ctx, f)
}

// PageRows is how many rows Take copies per statement.
var PageRows = 500

// Take stores a snapshot of cluster c at the datastore's newest revision,
// filed under parent and name (who may restore from it), and returns it.
//
// The rows are copied a page at a time, each page read in one statement
// and written in one short transaction as a background write, so that
// copying a large workspace never holds the datastore's writer for long
// (on SQLite one statement copying 100,000 rows held it for seconds and
// every tenant's writes waited). The pages are consistent with each other:
// each reads the rows as of the snapshot's revision, which later writes do
// not change; only a compaction past that revision could, and the copy
// fails then (taken again on the next try). Until its last page is
// stored the snapshot is unfinished (objects -1): List does not show it,
// a restore refuses it, and DeleteUnfinished removes what a stopped
// process left.
//
// On PostgreSQL, whose writers do not wait for each other's statements on
// other rows, the copy is one transaction instead (paging there re-read the
// workspace for every page: 7 s instead of 0.5 s for 20,000 objects).
func Take(ctx context.Context, db *sql.DB, d datastore.Dialect, bg Runner, c logicalcluster.Name, parent, name string) (Snapshot, error) {
	var rev int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM kine`).Scan(&rev); err != nil {
		return Snapshot{}, err
	}
	if d == datastore.Postgres {
		return takeInOneTransaction(ctx, db, d, rev, c, parent, name)
	}
	var id int64
	if err := run(ctx, bg, func(ctx context.Context) error {
		return db.QueryRowContext(ctx, q(d, `INSERT INTO kcp_snapshots (parent, name, cluster, revision, objects) VALUES (?, ?, ?, ?, -1) RETURNING id`),
			parent, name, string(c), rev).Scan(&id)
	}); err != nil {
		return Snapshot{}, err
	}
	finished := false
	defer func() {
		if !finished {
			_ = Delete(context.WithoutCancel(ctx), db, d, bg, id)
		}
	}()
	page := q(d, `SELECT s.name, s.value FROM (`+stateAt+`) AS s WHERE s.name > ? ORDER BY s.name LIMIT `+fmt.Sprint(PageRows))
	insert := q(d, `INSERT INTO kcp_snapshot_rows (snapshot_id, key, value) VALUES (?, ?, ?)`)
	var objects, size int64
	after := ""
	for {
		rows, err := readPage(ctx, db, page, append(stateArgs(c, rev), after))
		if err != nil {
			return Snapshot{}, err
		}
		if len(rows) == 0 {
			break
		}
		if err := run(ctx, bg, func(ctx context.Context) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			stmt, err := tx.PrepareContext(ctx, insert)
			if err != nil {
				return err
			}
			defer stmt.Close()
			for _, r := range rows {
				if _, err := stmt.ExecContext(ctx, id, r.Key, []byte(r.Value)); err != nil {
					return err
				}
			}
			return tx.Commit()
		}); err != nil {
			return Snapshot{}, err
		}
		for _, r := range rows {
			objects++
			size += int64(len(r.Value))
		}
		after = rows[len(rows)-1].Key
	}
	var compacted int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(prev_revision), 0) FROM kine WHERE name = 'compact_rev_key'`).Scan(&compacted); err != nil {
		return Snapshot{}, err
	}
	if compacted > rev {
		return Snapshot{}, fmt.Errorf("the datastore was compacted past revision %d while the snapshot was copied; taking it again", rev)
	}
	if err := run(ctx, bg, func(ctx context.Context) error {
		res, err := db.ExecContext(ctx, q(d, `UPDATE kcp_snapshots SET objects = ?, bytes = ? WHERE id = ?`), objects, size, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return fmt.Errorf("snapshot %d was deleted while it was taken", id)
		}
		return nil
	}); err != nil {
		return Snapshot{}, err
	}
	finished = true
	s, _, err := Get(ctx, db, d, id)
	return s, err
}

func takeInOneTransaction(ctx context.Context, db *sql.DB, d datastore.Dialect, rev int64, c logicalcluster.Name, parent, name string) (Snapshot, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Snapshot{}, err
	}
	defer tx.Rollback()
	var id int64
	if err := tx.QueryRowContext(ctx, q(d, `INSERT INTO kcp_snapshots (parent, name, cluster, revision) VALUES (?, ?, ?, ?) RETURNING id`),
		parent, name, string(c), rev).Scan(&id); err != nil {
		return Snapshot{}, err
	}
	if _, err := tx.ExecContext(ctx, q(d, `INSERT INTO kcp_snapshot_rows (snapshot_id, key, value) SELECT CAST(? AS BIGINT), s.name, s.value FROM (`+stateAt+`) AS s`),
		append([]any{id}, stateArgs(c, rev)...)...); err != nil {
		return Snapshot{}, err
	}
	if _, err := tx.ExecContext(ctx, q(d, `UPDATE kcp_snapshots SET
		objects = (SELECT COUNT(*) FROM kcp_snapshot_rows WHERE snapshot_id = ?),
		bytes = (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM kcp_snapshot_rows WHERE snapshot_id = ?)
		WHERE id = ?`), id, id, id); err != nil {
		return Snapshot{}, err
	}
	if err := tx.Commit(); err != nil {
		return Snapshot{}, err
	}
	s, _, err := Get(ctx, db, d, id)
	return s, err
}

func readPage(ctx context.Context, db *sql.DB, query string, args []any) ([]Row, error) {
	rs, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		var v []byte
		if err := rs.Scan(&r.Key, &v); err != nil {
			return nil, err
		}
		r.Value = v
		out = append(out, r)
	}
	return out, rs.Err()
}

const columns = `id, parent, name, cluster, revision, taken_at, objects, bytes`

func scan(row interface{ Scan(...any) error }) (Snapshot, error) {
	var s Snapshot
	var cluster string
	var at any
	if err := row.Scan(&s.ID, &s.Parent, &s.Name, &cluster, &s.Revision, &at, &s.Objects, &s.Bytes); err != nil {
		return s, err
	}
	s.Cluster = logicalcluster.Name(cluster)
	switch v := at.(type) {
	case time.Time:
		s.TakenAt = v
	case string:
		s.TakenAt, _ = time.Parse("2006-01-02T15:04:05.000Z", v)
	case []byte:
		s.TakenAt, _ = time.Parse("2006-01-02T15:04:05.000Z", string(v))
	}
	return s, nil
}

// Get reads one snapshot by id.
func Get(ctx context.Context, db *sql.DB, d datastore.Dialect, id int64) (Snapshot, bool, error) {
	s, err := scan(db.QueryRowContext(ctx, q(d, `SELECT `+columns+` FROM kcp_snapshots WHERE id = ?`), id))
	if err == sql.ErrNoRows {
		return s, false, nil
	}
	return s, err == nil, err
}

// List is the finished snapshots filed under parent and name, newest
// first.
func List(ctx context.Context, db *sql.DB, d datastore.Dialect, parent, name string) ([]Snapshot, error) {
	rows, err := db.QueryContext(ctx, q(d, `SELECT `+columns+` FROM kcp_snapshots WHERE parent = ? AND name = ? AND objects >= 0 ORDER BY id DESC`), parent, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		s, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Rows is a snapshot's rows by key.
func Rows(ctx context.Context, db *sql.DB, d datastore.Dialect, id int64) (map[string][]byte, error) {
	rows, err := db.QueryContext(ctx, q(d, `SELECT key, value FROM kcp_snapshot_rows WHERE snapshot_id = ?`), id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var k string
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// Delete removes a snapshot and its rows. On SQLite it marks the snapshot
// unfinished (no longer listed or restorable), deletes its rows a page at
// a time as background writes, then the snapshot itself; stopped half
// way, DeleteUnfinished completes it.
func Delete(ctx context.Context, db *sql.DB, d datastore.Dialect, bg Runner, id int64) error {
	if d == datastore.Postgres {
		// One transaction (see Take).
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, q(d, `DELETE FROM kcp_snapshots WHERE id = ?`), id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q(d, `DELETE FROM kcp_snapshot_rows WHERE snapshot_id = ?`), id); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := run(ctx, bg, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, q(d, `UPDATE kcp_snapshots SET objects = -1 WHERE id = ?`), id)
		return err
	}); err != nil {
		return err
	}
	del := q(d, `DELETE FROM kcp_snapshot_rows WHERE snapshot_id = ? AND key IN
		(SELECT key FROM kcp_snapshot_rows WHERE snapshot_id = ? ORDER BY key LIMIT `+fmt.Sprint(PageRows)+`)`)
	for {
		var n int64
		if err := run(ctx, bg, func(ctx context.Context) error {
			res, err := db.ExecContext(ctx, del, id, id)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		}); err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	return run(ctx, bg, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, q(d, `DELETE FROM kcp_snapshots WHERE id = ?`), id)
		return err
	})
}

// DeleteUnfinished deletes the snapshots filed under parent and name that
// were never finished or only half deleted (their process stopped); call
// it only while no Take or Delete of theirs runs.
func DeleteUnfinished(ctx context.Context, db *sql.DB, d datastore.Dialect, bg Runner, parent, name string) error {
	ids, err := ids(ctx, db, d, `SELECT id FROM kcp_snapshots WHERE parent = ? AND name = ? AND objects < 0`, parent, name)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := Delete(ctx, db, d, bg, id); err != nil {
			return err
		}
	}
	return nil
}

// DeleteAll deletes every snapshot filed under parent and name, finished
// or not.
func DeleteAll(ctx context.Context, db *sql.DB, d datastore.Dialect, bg Runner, parent, name string) error {
	ids, err := ids(ctx, db, d, `SELECT id FROM kcp_snapshots WHERE parent = ? AND name = ?`, parent, name)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := Delete(ctx, db, d, bg, id); err != nil {
			return err
		}
	}
	return nil
}

func ids(ctx context.Context, db *sql.DB, d datastore.Dialect, query string, args ...any) ([]int64, error) {
	rs, err := db.QueryContext(ctx, q(d, query), args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []int64
	for rs.Next() {
		var id int64
		if err := rs.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rs.Err()
}

// Read is a snapshot file of cluster c at the datastore's newest revision,
// read in one statement (kcp snapshot; nothing is written).
func Read(ctx context.Context, db *sql.DB, d datastore.Dialect, c logicalcluster.Name) (*File, error) {
	f := &File{Kind: FileKind, Version: FileVersion, Cluster: string(c), TakenAt: time.Now().UTC()}
	var exists int
	if err := db.QueryRowContext(ctx, q(d, `SELECT COUNT(*) FROM kine WHERE name = ? AND deleted = 0`), "/registry/tenancy.kcp.io/logicalclusters/"+string(c)+"/cluster").Scan(&exists); err != nil {
		return nil, err
	}
	if exists == 0 {
		return nil, fmt.Errorf("there is no logical cluster %s in this datastore", c)
	}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM kine`).Scan(&f.Revision); err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, q(d, stateAt+` ORDER BY k.name`), stateArgs(c, f.Revision)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r Row
		var v []byte
		if err := rows.Scan(&r.Key, &v); err != nil {
			return nil, err
		}
		if !json.Valid(v) {
			return nil, fmt.Errorf("%s is not stored as JSON", r.Key)
		}
		r.Value = v
		f.Rows = append(f.Rows, r)
	}
	return f, rows.Err()
}

// Check refuses a file that is not a snapshot this build reads.
func (f *File) Check() error {
	if f.Kind != FileKind || f.Version != FileVersion {
		return fmt.Errorf("not a kcp workspace snapshot (kind %q version %d; want %s version %d)", f.Kind, f.Version, FileKind, FileVersion)
	}
	c, err := logicalcluster.Parse(f.Cluster)
	if err != nil || c.IsWildcard() {
		return fmt.Errorf("the snapshot's cluster %q is not a workspace path", f.Cluster)
	}
	prefix := "/registry/"
	for _, r := range f.Rows {
		fields := strings.Split(r.Key, "/")
		if !strings.HasPrefix(r.Key, prefix) || len(fields) < 6 || fields[4] != f.Cluster {
			return fmt.Errorf("row %q is not a key of %s", r.Key, f.Cluster)
		}
		if !json.Valid(r.Value) {
			return fmt.Errorf("row %q is not JSON", r.Key)
		}
	}
	return nil
}

// Load stores a snapshot file, filed under parent and name.
func Load(ctx context.Context, db *sql.DB, d datastore.Dialect, f *File, parent, name string) (Snapshot, error) {
	if err := f.Check(); err != nil {
		return Snapshot{}, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Snapshot{}, err
	}
	defer tx.Rollback()
	var id int64
	if err := tx.QueryRowContext(ctx, q(d, `INSERT INTO kcp_snapshots (parent, name, cluster, revision, taken_at, objects, bytes) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`),
		parent, name, f.Cluster, f.Revision, changehistory.Timestamp(d, f.TakenAt), len(f.Rows), bytesOf(f)).Scan(&id); err != nil {
		return Snapshot{}, err
	}
	stmt, err := tx.PrepareContext(ctx, q(d, `INSERT INTO kcp_snapshot_rows (snapshot_id, key, value) VALUES (?, ?, ?)`))
	if err != nil {
		return Snapshot{}, err
	}
	defer stmt.Close()
	for _, r := range f.Rows {
		if _, err := stmt.ExecContext(ctx, id, r.Key, []byte(r.Value)); err != nil {
			return Snapshot{}, fmt.Errorf("%s: %w", r.Key, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return Snapshot{}, err
	}
	s, _, err := Get(ctx, db, d, id)
	return s, err
}

func bytesOf(f *File) int64 {
	var n int64
	for _, r := range f.Rows {
		n += int64(len(r.Value))
	}
	return n
}

// FilePrefix starts the name of a snapshot loaded from a file: its
// revision is the revision of the datastore it was taken from.
const FilePrefix = "kcp-restore-from-file-"
