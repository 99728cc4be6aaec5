package shards

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file, err string
	}{
		{"shards:\n- {name: root, url: 'https://127.0.0.1:6443'}\n- {name: eu-2, url: 'https://10.0.0.2:6443'}\nexternalURL: https://kcp.example.com\n", ""},
		{"shards: []\n", "names no shard"},
		{"shards:\n- {name: eu-2, url: 'https://10.0.0.2:6443'}\n", `no shard is named "root"`},
		{"shards:\n- {name: root, url: 'https://a:1'}\n- {name: root, url: 'https://b:1'}\n", "named twice"},
		{"shards:\n- {name: Root_1, url: 'https://a:1'}\n", "shards[0].name"},
		{"shards:\n- {name: root, url: 'http://a:1'}\n", "must be https://host:port"},
		{"shards:\n- {name: root, url: 'https://a:1/clusters/root'}\n", "must be https://host:port"},
		{"shards:\n- {name: root, url: 'https://a:1'}\nexternalURL: kcp.example.com\n", "externalURL"},
		{"shards:\n- {name: root, url: 'https://a:1', weight: 3}\n", "unknown field"},
	} {
		p := filepath.Join(dir, "shards.yaml")
		if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(p)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.file, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.file, err, tc.err)
		case tc.err == "":
			if got := strings.Join(c.Names(), ","); got != "eu-2,root" {
				t.Errorf("Names() = %s", got)
			}
		}
	}
}

func TestMembership(t *testing.T) {
	var none *Membership
	if none.Sharded() || none.Remote("eu-2") {
		t.Error("a server without a shards file is one shard and has no remote ones")
	}
	m := &Membership{Self: "root", Config: &Config{Shards: []Shard{{Name: "root", URL: "https://a:1"}, {Name: "eu-2", URL: "https://b:1"}}}}
	if !m.Remote("eu-2") || m.Remote("root") || m.Remote("") {
		t.Error("Remote: only another shard's name is remote")
	}
	if _, err := m.Peer("eu-9"); err == nil || !strings.Contains(err.Error(), "eu-2, root") {
		t.Errorf("Peer of an unknown shard: %v", err)
	}
}
