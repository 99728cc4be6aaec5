// Package sharedmaps hands out one copy of each small string map, for
// caches that hold many objects whose maps are equal: every object of a
// logical cluster has the same annotations (its kcp.io/cluster), every
// cluster's "default" namespace the same labels, every kube-root-ca.crt the
// same data. Decoded, each such map is an allocation of its own (about 300
// bytes for one entry); shared, it is one per distinct content.
//
// A shared map must never be changed: callers use it only in objects that
// their readers treat as read-only (the watch cache's objects, an
// informer's cache), which is the contract those caches already have.
package sharedmaps

import (
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	// MaxEntries and MaxBytes bound what is shared: small maps, where a
	// copy per object costs most relative to its content. Larger maps are
	// returned as they are.
	MaxEntries = 8
	MaxBytes   = 4 << 10
	// resetEvery is how often the table is emptied, so that maps nobody
	// holds any more (a deleted cluster's annotations) are not kept for
	// ever. Objects keep the maps they have; later objects share new ones.
	resetEvery = 10 * time.Minute
)

var table struct {
	mu sync.Mutex
	// maps holds contents seen at least twice; seen, the hashes of
	// contents seen once. A content most objects have alone (a field set
	// with the object's own name) then costs the table 8 bytes and a map
	// slot, not a copy of its key, until the table is emptied.
	maps    map[string]map[string]string
	seen    map[uint64]struct{}
	emptied time.Time
}

var seed = maphash.MakeSeed()

// Of returns a map equal to m that other callers may get too. m itself is
// returned when it is empty, too large, or the first or second of its
// content (the second becomes the shared one).
func Of(m map[string]string) map[string]string { return share(m, false) }

// Copy is Of for a map the caller may only read (another cache's object):
// the shared map equal to m, or else a copy of m, never m itself. A nil
// map stays nil and an empty one empty. Where the content is shared
// already, nothing is copied: a cache filled from another cache's objects
// never holds a map of its own for them, not even briefly.
func Copy(m map[string]string) map[string]string { return share(m, true) }

func share(m map[string]string, copied bool) map[string]string {
	size, ok := shareable(m)
	if !ok {
		if copied {
			return maps.Clone(m)
		}
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	for _, k := range keys {
		// Keys cannot contain NUL (label and annotation keys are qualified
		// names; config map keys are file names), so this is unambiguous.
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
	h := maphash.String(seed, key)
	table.mu.Lock()
	defer table.mu.Unlock()
	if now := time.Now(); table.maps == nil || now.Sub(table.emptied) > resetEvery {
		table.maps, table.seen, table.emptied = map[string]map[string]string{}, map[uint64]struct{}{}, now
	}
	if got, ok := table.maps[key]; ok {
		return got
	}
	if copied {
		m = maps.Clone(m)
	}
	if _, ok := table.seen[h]; !ok {
		table.seen[h] = struct{}{}
		return m
	}
	delete(table.seen, h)
	table.maps[key] = m
	return m
}

// shareable reports whether m is small enough to share (not empty, at most
// MaxEntries entries and MaxBytes of content) and its content's size.
func shareable(m map[string]string) (size int, ok bool) {
	if len(m) == 0 || len(m) > MaxEntries {
		return 0, false
	}
	for k, v := range m {
		size += len(k) + len(v) + 2
	}
	return size, size <= MaxBytes
}
