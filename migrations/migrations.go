// Package migrations owns the SQL schema of the datastore: kine's table with
// the generated cluster column and its index, and the auditing views. One
// directory of golang-migrate files per dialect, embedded in the binary.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite3"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/kcpsql/kcp/storage/datastore"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Table is where golang-migrate records the schema version.
const Table = "kcp_schema_migrations"

// Status is the schema version of a datastore.
type Status struct {
	Version uint
	Dirty   bool
	// Latest is the newest version this binary knows.
	Latest uint
}

// Up migrates the datastore to the newest schema. It opens its own connection
// with the same SQLite library kine uses and closes it before returning, so
// kine finds a finished schema and no open migration connection.
func Up(ctx context.Context, ds *datastore.Datastore) (Status, error) {
	var st Status
	err := withMigrate(ds, func(m *migrate.Migrate, latest uint) error {
		st.Latest = latest
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		v, dirty, err := m.Version()
		st.Version, st.Dirty = v, dirty
		return err
	})
	return st, err
}

// Version reports the schema version without changing anything.
func Version(ctx context.Context, ds *datastore.Datastore) (Status, error) {
	var st Status
	err := withMigrate(ds, func(m *migrate.Migrate, latest uint) error {
		st.Latest = latest
		v, dirty, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		st.Version, st.Dirty = v, dirty
		return err
	})
	return st, err
}

func withMigrate(ds *datastore.Datastore, fn func(*migrate.Migrate, uint) error) error {
	dir := string(ds.Dialect)
	sub, err := fs.Sub(files, dir)
	if err != nil {
		return err
	}
	latest, err := latestVersion(sub)
	if err != nil {
		return err
	}
	src, err := iofs.New(files, dir)
	if err != nil {
		return err
	}
	var (
		db     *sql.DB
		driver database.Driver
	)
	switch ds.Dialect {
	case datastore.SQLite:
		if db, err = sql.Open("sqlite3", ds.SQLiteDSN()); err == nil {
			driver, err = sqlitemigrate.WithInstance(db, &sqlitemigrate.Config{MigrationsTable: Table})
		}
	case datastore.Postgres:
		if db, err = sql.Open("pgx", ds.URL.String()); err == nil {
			driver, err = pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: Table})
		}
	default:
		err = fmt.Errorf("unknown dialect %q", ds.Dialect)
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		return fmt.Errorf("migrating datastore %s: %v", ds, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, string(ds.Dialect), driver)
	if err != nil {
		db.Close()
		return fmt.Errorf("migrating datastore %s: %v", ds, err)
	}
	defer m.Close() // closes db too
	if err := fn(m, latest); err != nil {
		return fmt.Errorf("migrating datastore %s: %v", ds, err)
	}
	return nil
}

func latestVersion(fsys fs.FS) (uint, error) {
	src, err := iofs.New(fsys, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		next, err := src.Next(v)
		if err != nil {
			return v, nil
		}
		v = next
	}
}
