package memreturn

import "testing"

func TestSurplus(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		free, live uint64
		gogc       int
		want       bool
	}{
		// Right after a collection in steady state the free heap is about
		// the garbage of one cycle (live * GOGC/100): nothing to do.
		{free: 1000 * mib, live: 1000 * mib, gogc: 100, want: false},
		{free: 1400 * mib, live: 1000 * mib, gogc: 100, want: false},
		// After a start-up fill several times the live heap is free.
		{free: 3000 * mib, live: 1000 * mib, gogc: 100, want: true},
		// A lower GOGC explains less free heap.
		{free: 1000 * mib, live: 1000 * mib, gogc: 25, want: true},
		// Small heaps are not worth a forced collection.
		{free: 60 * mib, live: 10 * mib, gogc: 100, want: false},
		// GOGC=off: the operator manages memory.
		{free: 3000 * mib, live: 1000 * mib, gogc: -1, want: false},
	} {
		if got := Surplus(c.free, c.live, c.gogc); got != c.want {
			t.Errorf("Surplus(free %d MiB, live %d MiB, GOGC %d) = %v, want %v", c.free/mib, c.live/mib, c.gogc, got, c.want)
		}
	}
}
