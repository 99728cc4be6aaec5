// Package memreturn gives the operating system back the memory a burst of
// work left free in the Go heap. A server with many workspaces decodes every
// stored object into its caches at start-up; the garbage of that fill leaves
// the heap several times larger than what stays live, and the Go runtime
// returns the difference only slowly (its scavenger keeps about the heap
// goal, twice the live heap with GOGC=100, and works at about 1% of a CPU).
// Until then the process's RSS is several times what it holds
// (docs/performance.md).
//
// Every Interval the package compares the free heap (spans the runtime
// holds but no object uses) with the live heap. When the free heap stays
// larger than a garbage collection cycle can explain (the live heap times
// GOGC/100, plus half the live heap) on two checks in a row, it forces a
// collection and returns the free memory (debug.FreeOSMemory), at most once
// per MinGap. In steady state the free heap stays below that bound and the
// package does nothing. With GOGC=off, or a soft memory limit in effect
// (GOMEMLIMIT, or one server/memlimit set from the container's limit: the
// runtime then returns memory itself to stay under it), it does nothing
// either.
package memreturn

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/memlimit"
)

const (
	// Interval is how often the heap is looked at.
	Interval = 30 * time.Second
	// MinGap is the least time between two returns.
	MinGap = 2 * time.Minute
	// minSurplus is the least free heap worth a forced collection.
	minSurplus = 64 << 20
)

var returned = basemetrics.NewCounter(&basemetrics.CounterOpts{
	Name:           "kcp_memory_returned_bytes_total",
	Help:           "Free Go heap returned to the operating system after a burst of work (start-up cache fill, large lists) left the heap much larger than its live objects.",
	StabilityLevel: basemetrics.ALPHA,
})

func init() { legacyregistry.MustRegister(returned) }

// gcPercent is GOGC as the runtime reads it (-1 when off).
func gcPercent() int {
	v := os.Getenv("GOGC")
	if v == "" {
		return 100
	}
	if v == "off" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 100
	}
	return n
}

// heap reads the free and live heap.
func heap() (free, live uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		free = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		live = s[1].Value.Uint64()
	}
	return free, live
}

// Surplus reports whether free heap beyond what a collection cycle explains
// is there to return.
func Surplus(free, live uint64, gogc int) bool {
	if gogc < 0 || free < minSurplus {
		return false
	}
	return free > live*uint64(gogc)/100+live/2
}

// Run watches the heap until ctx ends.
func Run(ctx context.Context) {
	gogc := gcPercent()
	if gogc < 0 || memlimit.Active() {
		return
	}
	var last time.Time
	seen := false
	wait.UntilWithContext(ctx, func(context.Context) {
		free, live := heap()
		if !Surplus(free, live, gogc) {
			seen = false
			return
		}
		if !seen || time.Since(last) < MinGap {
			seen = true
			return
		}
		t0 := time.Now()
		debug.FreeOSMemory()
		after, liveAfter := heap()
		last, seen = time.Now(), false
		if free > after {
			returned.Add(float64(free - after))
		}
		klog.InfoS("Returned free heap memory to the operating system", "freeMiB", free>>20, "liveMiB", live>>20, "freeAfterMiB", after>>20, "liveAfterMiB", liveAfter>>20, "took", time.Since(t0).Round(time.Millisecond))
	}, Interval)
}
