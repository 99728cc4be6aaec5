package datastore

import (
	"context"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in, dialect, str, err string
	}{
		{in: "", dialect: "sqlite", str: "sqlite:///data/kcp.db"},
		{in: "sqlite:///var/lib/kcp/x.db", dialect: "sqlite", str: "sqlite:///var/lib/kcp/x.db"},
		{in: "postgres://u:pw@db:5432/kcp?sslmode=disable", dialect: "postgres", str: "postgres://u:xxxxx@db:5432/kcp?sslmode=disable"},
		{in: "postgresql://db/kcp", dialect: "postgres", str: "postgresql://db/kcp"},
		{in: "sqlite://", err: "names no file"},
		{in: "sqlite:///x.db?mode=ro", err: "query parameters"},
		{in: "postgres://db/", err: "names no database"},
		{in: "postgres:///kcp", err: "has no host"},
		{in: "postgres://db/KCP", err: "lower case"},
		{in: "mysql://u:secret@db/kcp", err: "not understood"},
		{in: "etcd://127.0.0.1:2379", err: "not understood"},
	}
	for _, c := range cases {
		d, err := Parse(c.in, "/data")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%q) error = %v, want %q", c.in, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("Parse(%q) error leaks the password: %v", c.in, err)
			}
			continue
		}
		if err != nil || string(d.Dialect) != c.dialect || d.String() != c.str {
			t.Errorf("Parse(%q) = %v %v, want %s %s", c.in, d, err, c.dialect, c.str)
		}
	}
}

// Pools: PostgreSQL connections are bounded and kept while idle; SQLite
// files get kine's default pool.
func TestPools(t *testing.T) {
	pg, err := Parse("postgres://u@h:5432/db", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k, s := pg.Pools(20)
	if k.MaxOpen+s.MaxOpen != 20 || k.MaxOpen != 15 || k.MaxIdle != k.MaxOpen || s.MaxIdle != s.MaxOpen || k.IdleTime <= 0 {
		t.Errorf("20 connections split as kine %+v, server %+v", k, s)
	}
	k, s = pg.Pools(4)
	if k.MaxOpen < 1 || s.MaxOpen < 1 || k.MaxOpen+s.MaxOpen != 4 {
		t.Errorf("4 connections split as kine %+v, server %+v", k, s)
	}
	if k, s := pg.Pools(0); k != DefaultPool || s != DefaultPool {
		t.Errorf("no bound: kine %+v, server %+v", k, s)
	}
	lite, err := Parse("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if k, s := lite.Pools(20); k != DefaultPool || s != DefaultPool || k.MaxIdle <= 2 {
		t.Errorf("SQLite: kine %+v, server %+v", k, s)
	}
	db, err := lite.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Errorf("SQLite pool: %v", err)
	}
	if got := db.Stats().MaxOpenConnections; got != 0 {
		t.Errorf("SQLite pool bounded to %d connections", got)
	}
}

// A write through the server's SQLite pool does not fail while another
// connection of the pool has a read of the same table open (with a shared
// cache it failed at once: "database table is locked").
func TestSQLiteWriteWhileReading(t *testing.T) {
	ds, err := Parse("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := ds.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := db.Exec(`INSERT INTO t (v) VALUES ('x')`); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Query(`SELECT id, v FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() { // the read is open, holding its place in t
		t.Fatal("no row")
	}
	if _, err := db.Exec(`INSERT INTO t (v) VALUES ('during the read')`); err != nil {
		t.Errorf("a write while a read of the table is open: %v", err)
	}
}
