package logicalcluster

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	valid := []string{"root", "system:crds", "root:a", "root:acme:web", "root:a-b:c1", "*", "root:" + strings.Repeat("a", 63)}
	for _, s := range valid {
		if _, err := Parse(s); err != nil {
			t.Errorf("Parse(%q) = %v, want ok", s, err)
		}
	}
	invalid := []string{"", "acme", "system", "system:other", "system:crds:a", "Root", "root:", ":root", "root::a", "root:A", "root:-a", "root:a-", "root:a/b",
		"root:a b", "root:a.b", "root:" + strings.Repeat("a", 64), "root:*", "**", "root:%2f", "root:é",
		"root" + strings.Repeat(":abcdefgh", 30)}
	for _, s := range invalid {
		if n, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %q, want an error", s, n)
		}
	}
}

func TestParentAndBase(t *testing.T) {
	n := Name("root:acme:web")
	if p, ok := n.Parent(); !ok || p != "root:acme" {
		t.Errorf("Parent = %q %v", p, ok)
	}
	if _, ok := Root.Parent(); ok {
		t.Error("root has a parent")
	}
	if n.Base() != "web" || Root.Base() != "root" {
		t.Errorf("Base = %q %q", n.Base(), Root.Base())
	}
	if Root.Join("x") != "root:x" {
		t.Error("Join")
	}
}

// FuzzParse checks that whatever Parse accepts can never break out of its
// key segment: no '/', no upper case, starts at root or is the wildcard.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"root", "root:a", "*", "root/a", "root:..", "root:a%2Fb", "ROOT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		if n.IsWildcard() {
			return
		}
		if strings.ContainsAny(string(n), "/%.* \x00") || strings.ToLower(string(n)) != string(n) {
			t.Fatalf("Parse accepted %q", s)
		}
		if !strings.HasPrefix(string(n), "root") || len(n) > MaxLength {
			t.Fatalf("Parse accepted %q", s)
		}
	})
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		n, tree Name
		want    bool
	}{
		{"root:acme", "root:acme", true},
		{"root:acme:web", "root:acme", true},
		{"root:acme:web:db", "root:acme", true},
		{"root:acme-2", "root:acme", false},
		{"root:acmeweb", "root:acme", false},
		{"root", "root:acme", false},
		{"root:other:acme", "root:acme", false},
		{"root:acme", "root", true},
	} {
		if got := c.n.Within(c.tree); got != c.want {
			t.Errorf("%q.Within(%q) = %v, want %v", c.n, c.tree, got, c.want)
		}
	}
}
