package shards

import (
	"context"
	"errors"
	"testing"
)

// TestLeastFullChooses: the shard with the fewest workspaces among those
// that answer; each choice counts itself until the next asking, so a burst
// spreads; a shard that does not answer is never chosen; with none
// answering, this shard.
func TestLeastFullChooses(t *testing.T) {
	cfg := &Config{Shards: []Shard{{Name: "root"}, {Name: "eu-1"}, {Name: "eu-2"}}}
	counts := map[string]int64{"root": 5, "eu-1": 2}
	asked := 0
	l := NewLeastFull(&Membership{Self: "root", Config: cfg})
	l.count = func(_ context.Context, shard string) (int64, error) {
		asked++
		if n, ok := counts[shard]; ok {
			return n, nil
		}
		return 0, errors.New("connection refused")
	}
	var got []string
	for range 6 {
		s, _ := l.Choose(context.Background())
		got = append(got, s)
	}
	// eu-1 at 2, 3 and 4, then root and eu-1 tie (the first by name wins);
	// eu-2 never.
	want := []string{"eu-1", "eu-1", "eu-1", "eu-1", "root", "eu-1"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("choices %v, want %v", got, want)
		}
	}
	if asked != 3 {
		t.Errorf("asked the shards %d times for 6 choices, want 3 (once each)", asked)
	}

	none := NewLeastFull(&Membership{Self: "eu-2", Config: cfg})
	none.count = func(context.Context, string) (int64, error) { return 0, errors.New("down") }
	if s, _ := none.Choose(context.Background()); s != "eu-2" {
		t.Errorf("no shard answering: chose %q, want this shard eu-2", s)
	}
}
