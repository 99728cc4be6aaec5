package datastore

import (
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
