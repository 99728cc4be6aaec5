package frontproxy

import (
	"context"
	"testing"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// During a move two shards hold a cluster; whatever order the proxy hears
// of them in, it routes to the copy not marked moved once it has seen it,
// and never back.
func TestRoutesPreferTheCopyNotMoved(t *testing.T) {
	const c = logicalcluster.Name("root:m")
	type ev struct {
		shard          string
		moved, deleted bool
	}
	for name, events := range map[string][]ev{
		"marked, then the new copy, then deleted": {{"a", false, false}, {"a", true, false}, {"b", false, false}, {"a", true, true}},
		"new copy first":                        {{"a", false, false}, {"b", false, false}, {"a", true, false}, {"a", true, true}},
		"a late unmarked event of the old copy": {{"a", false, false}, {"a", true, false}, {"b", false, false}, {"a", false, false}},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRoutes()
			sawB := false
			for i, e := range events {
				if e.deleted {
					r.remove(c, e.shard)
				} else {
					r.set(c, e.shard, e.moved)
				}
				sawB = sawB || e.shard == "b"
				got, ok, _ := r.get(c)
				if sawB && (got != "b" || !ok) {
					t.Fatalf("after event %d (%+v): routed to %q (%v), want b", i, e, got, ok)
				}
			}
		})
	}
	// Only the copy left behind known: the lookup waits, then goes there
	// (which answers 503), not to the root shard.
	r := newRoutes()
	r.set(c, "a", true)
	if got := r.lookup(context.Background(), c, 0); got != "a" {
		t.Errorf("only a moved copy known: routed to %q, want a", got)
	}
}
