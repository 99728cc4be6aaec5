// Package datastore owns the --datastore URL: which SQL dialect it names, how
// to redact it for messages, and whether the database behind it is reachable
// (creating the PostgreSQL database when it is missing).
package datastore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "github.com/mattn/go-sqlite3"    // the SQLite library kine uses (cgo)
)

// Dialect is the SQL dialect of a datastore.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// sqliteParams are kine's defaults for its SQLite driver (WAL, busy timeout,
// immediate transactions), used for every SQLite connection we open, but
// for kine's cache=shared: the driver ignores it in kine's DSN (a plain
// path, not a file: URI), so kine's connections each have their own cache,
// and in ours (a URI) it made a write fail at once with "database table is
// locked" whenever another connection had a read of that table open
// (shared-cache locking, which the busy timeout does not cover; kine's own
// build waits for such locks with the sqlite_unlock_notify tag, ours does
// not). WAL without a shared cache lets reads and a write run together.
const sqliteParams = "_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&_stmt_cache_size=20"

// Datastore is a parsed --datastore value.
type Datastore struct {
	Dialect Dialect
	// Path is the SQLite file (absolute).
	Path string
	// URL is the PostgreSQL URL as given.
	URL *url.URL
}

// Parse understands "" (the SQLite file in rootDir), sqlite:///abs/file.db,
// sqlite://relative/file.db, a bare file path ending in .db, and
// postgres:// or postgresql:// URLs.
func Parse(value, rootDir string) (*Datastore, error) {
	switch {
	case value == "":
		p, err := filepath.Abs(filepath.Join(rootDir, "kcp.db"))
		if err != nil {
			return nil, err
		}
		return &Datastore{Dialect: SQLite, Path: p}, nil
	case strings.HasPrefix(value, "sqlite://"):
		p := strings.TrimPrefix(value, "sqlite://")
		if i := strings.IndexByte(p, '?'); i >= 0 {
			return nil, fmt.Errorf("datastore %q: query parameters are not supported for sqlite; kcp sets its own", value)
		}
		if p == "" || p == "/" {
			return nil, fmt.Errorf("datastore %q names no file; use sqlite:///absolute/path/kcp.db", value)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		return &Datastore{Dialect: SQLite, Path: abs}, nil
	case strings.HasPrefix(value, "postgres://"), strings.HasPrefix(value, "postgresql://"):
		u, err := url.Parse(value)
		if err != nil {
			return nil, fmt.Errorf("datastore %q is not a valid URL: %v", Redact(value), err)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("datastore %q has no host; expected postgres://user@host:5432/dbname", Redact(value))
		}
		db := strings.TrimPrefix(u.Path, "/")
		if db == "" || strings.Contains(db, "/") {
			return nil, fmt.Errorf("datastore %q names no database; expected postgres://user@host:5432/dbname", Redact(value))
		}
		if db != strings.ToLower(db) {
			return nil, fmt.Errorf("datastore %q: database name %q must be lower case (kine folds it)", Redact(value), db)
		}
		return &Datastore{Dialect: Postgres, URL: u}, nil
	default:
		return nil, fmt.Errorf("datastore %q is not understood; use sqlite:///path/kcp.db or postgres://user@host:5432/dbname", Redact(value))
	}
}

// String returns the datastore with any password redacted.
func (d *Datastore) String() string {
	if d.Dialect == SQLite {
		return "sqlite://" + d.Path
	}
	return d.URL.Redacted()
}

// Database is the PostgreSQL database name.
func (d *Datastore) Database() string { return strings.TrimPrefix(d.URL.Path, "/") }

// KineEndpoint is the endpoint kine's driver factory understands.
func (d *Datastore) KineEndpoint() string {
	if d.Dialect == SQLite {
		// kine runs VACUUM on its SQLite file at every start: it rewrites
		// the whole file (seconds at 100,000 workspaces, minutes at a
		// million, and twice the file's size on the disk meanwhile) before
		// anything is served. Freed pages are reused by later writes; an
		// operator reclaims space with VACUUM while kcp is stopped
		// (docs/operations.md).
		return "sqlite://" + d.Path + "?" + sqliteParams + "&_kine_disable_startup_vacuum=1"
	}
	return d.URL.String()
}

// SQLiteDSN is the go-sqlite3 DSN of the file.
func (d *Datastore) SQLiteDSN() string { return "file:" + d.Path + "?" + sqliteParams }

// Redact hides the password of a URL-looking string.
func Redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// Prepare makes the datastore ready for migrations: for SQLite it creates the
// file's directory and checks that the file can be opened; for PostgreSQL it
// connects to the server and creates the database if it is missing.
func (d *Datastore) Prepare(ctx context.Context) error {
	if d.Dialect == SQLite {
		if err := os.MkdirAll(filepath.Dir(d.Path), 0o700); err != nil {
			return fmt.Errorf("datastore %s: cannot create its directory: %v", d, err)
		}
		db, err := sql.Open("sqlite3", d.SQLiteDSN())
		if err != nil {
			return fmt.Errorf("datastore %s: %v", d, err)
		}
		defer db.Close()
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("datastore %s cannot be opened: %v (is the path writable?)", d, err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(d.URL.String())
	if err != nil {
		return fmt.Errorf("datastore %s is not a valid PostgreSQL URL: %v", d, err)
	}
	cfg.ConnectTimeout = 5 * time.Second
	target := cfg.Database
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		// The maintenance database may be closed to us; try the target itself.
		conn, err = pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("datastore %s unreachable: %v (is PostgreSQL running and does it accept this user?)", d, unwrapPg(err))
		}
		return conn.Close(ctx)
	}
	defer conn.Close(ctx)
	exists, err := databaseExists(ctx, conn, target)
	if err != nil {
		return fmt.Errorf("datastore %s: checking for database %q: %v", d, target, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{target}.Sanitize()); err != nil && !createdConcurrently(ctx, conn, target, err) {
			return fmt.Errorf("datastore %s: creating database %q: %v (grant CREATEDB or create it first)", d, target, err)
		}
	}
	return nil
}

// createdConcurrently reports whether a failed CREATE DATABASE lost to
// another replica creating the same database: replicas of a deployment
// start together on a database that does not exist yet. PostgreSQL answers
// the loser 42P04 (duplicate_database) when the other's create had
// committed, and 23505 (unique_violation on pg_database's name index) when
// both were inserting the catalog row at once; either way the database
// must exist now.
func createdConcurrently(ctx context.Context, conn *pgx.Conn, target string, err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "42P04" && pgErr.Code != "23505") {
		return false
	}
	exists, err := databaseExists(ctx, conn, target)
	return err == nil && exists
}

func databaseExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var exists bool
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	return exists, err
}

func unwrapPg(err error) error {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		if u := errors.Unwrap(ce); u != nil {
			return u
		}
	}
	return err
}

// Open returns a database/sql handle on the datastore for read queries
// (auditing, finding a cluster's keys, confirming a create by its row), with
// the pool of a command-line tool (DefaultPool). Writes go through kine only.
func (d *Datastore) Open() (*sql.DB, error) {
	return d.OpenPool(DefaultPool)
}

// OpenPool is Open with the pool p.
func (d *Datastore) OpenPool(p Pool) (*sql.DB, error) {
	driver, dsn := "sqlite3", d.SQLiteDSN()
	if d.Dialect != SQLite {
		driver, dsn = "pgx", d.URL.String()
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(p.MaxOpen)
	db.SetMaxIdleConns(p.MaxIdle)
	db.SetConnMaxIdleTime(p.IdleTime)
	return db, nil
}

// Pool bounds one pool of connections to the datastore: at most MaxOpen
// open (0: no bound), up to MaxIdle of them kept while idle for IdleTime.
type Pool struct {
	MaxOpen, MaxIdle int
	IdleTime         time.Duration
}

// DefaultPool is kine's default pool (database/sql keeps only 2 idle
// connections: every query that runs while more than two others do would
// open a connection and close it after, on PostgreSQL a new server process
// each time).
var DefaultPool = Pool{MaxIdle: 20, IdleTime: 2 * time.Minute}

// DefaultMaxConnections is the default of --datastore-max-connections.
const DefaultMaxConnections = 20

// Pools divides the connections one server may open to the datastore
// between kine's pool (writes, reads, its poller: three quarters) and the
// server's own (the rest: confirming creates, usage counts, auditing,
// change history). On PostgreSQL both keep every connection they opened
// while it is idle for up to two minutes: opening one per request under
// load cost more than half of what a create costs (a new server process
// each time). SQLite files are opened, not connected to: no bound there,
// DefaultPool's idle connections.
func (d *Datastore) Pools(maxConnections int) (kine, server Pool) {
	if d.Dialect == SQLite || maxConnections <= 0 {
		return DefaultPool, DefaultPool
	}
	k := max(1, maxConnections*3/4)
	s := max(1, maxConnections-k)
	return Pool{MaxOpen: k, MaxIdle: k, IdleTime: DefaultPool.IdleTime}, Pool{MaxOpen: s, MaxIdle: s, IdleTime: DefaultPool.IdleTime}
}
