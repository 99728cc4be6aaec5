package serveddefaults

import (
	"context"
	"sort"
	"strings"

	kineserver "github.com/k3s-io/kine/pkg/server"
	"k8s.io/apimachinery/pkg/runtime"
)

// overlaps lists the kinds whose key ranges overlap [key, end).
func overlaps(key, end string) []*kind {
	var out []*kind
	for _, k := range kinds {
		if key < k.end && (end == "" || end > k.prefix) {
			out = append(out, k)
		}
	}
	return out
}

func (b *Backend) List(ctx context.Context, key, end string, limit, revision int64, only bool) (int64, []*kineserver.KeyValue, error) {
	if end == "" || len(overlaps(key, end)) == 0 {
		return b.Backend.List(ctx, key, end, limit, revision, only)
	}
	return b.list(ctx, key, end, limit, revision, only)
}

// parentRange is the range of parents whose defaults of kind k can fall in
// [lo, hi) (a superset).
func (k *kind) parentRange(lo, hi string) (string, string) {
	from := k.src.prefix + clusterStart(strings.TrimPrefix(lo, k.prefix))
	to := k.src.end
	if hi < k.end {
		rest := strings.TrimPrefix(hi, k.prefix)
		if c, _, ok := strings.Cut(rest, "/"); ok {
			rest = c + "0" // past every key of that cluster ('0' > '/')
		}
		to = k.src.prefix + rest
	}
	return from, to
}

// entry is one key of a merged list: a stored row (kv) or the served
// default of kind k of parent p.
type entry struct {
	key string
	kv  *kineserver.KeyValue
	k   *kind
	p   *parent
}

// list merges the stored rows of [key, end) with the served defaults.
func (b *Backend) list(ctx context.Context, key, end string, limit, revision int64, only bool) (int64, []*kineserver.KeyValue, error) {
	rev, entries, err := b.merge(ctx, key, end, limit, revision)
	if err != nil {
		return rev, nil, err
	}
	out := make([]*kineserver.KeyValue, len(entries))
	for i, e := range entries {
		kv := e.kv
		if kv == nil {
			kv = b.served(e.k, e.p) // merge keeps only parents that have one
		}
		out[i] = keysOnly(kv, only)
	}
	return rev, out, nil
}

// merge lists [key, end): the stored rows and the served defaults, in key
// order.
//
// Keys may sort differently from the parents they derive from ("a-b/x" <
// "a/x" but namespace "a" < "a-b"), so a page is built from a window of rows
// and of parents, and holds only keys below what the window proves: below
// the last row read when rows were cut off, and below what any later parent
// could add when parents were (kind.cutAfter). kine reads a page as
// complete when it has fewer than limit keys, so a window that proves too
// few keys is widened until it proves limit of them or holds everything.
func (b *Backend) merge(ctx context.Context, key, end string, limit, revision int64) (int64, []entry, error) {
	window := limit
	for {
		rev, rows, err := b.Backend.List(ctx, key, end, window, revision, false)
		if err != nil {
			return rev, nil, err
		}
		at := revision
		if at == 0 {
			at = rev
		}
		cut := end // keys below cut are all known
		if window > 0 && int64(len(rows)) >= window {
			cut = rows[len(rows)-1].Key + "\x00"
		}
		stored := map[string]*kineserver.KeyValue{}
		out := make([]entry, 0, len(rows))
		for _, kv := range rows {
			if _, _, ok := defaultOf(kv.Key); ok {
				stored[kv.Key] = kv
				if isTombstone(kv) {
					continue
				}
			}
			out = append(out, entry{key: kv.Key, kv: kv})
		}
		for _, k := range overlaps(key, end) {
			lo, hi := max(key, k.prefix), min(end, k.end)
			from, to := k.parentRange(lo, hi)
			read, err := b.parents(ctx, k.src, from, to, window, at)
			if err != nil {
				return rev, nil, err
			}
			if window > 0 && int64(read.rows) >= window {
				cut = min(cut, k.cutAfter(strings.TrimPrefix(read.lastKey, k.src.prefix)))
			}
			for _, p := range read.parents {
				if !p.active {
					continue
				}
				dk := k.key(p.rest)
				// Below cut, the rows read hold every row there is: the
				// map says whether dk is stored.
				if dk < lo || dk >= hi || hides(stored[dk], p) || !k.has(p) {
					continue
				}
				out = append(out, entry{key: dk, k: k, p: p})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
		n := sort.Search(len(out), func(i int) bool { return out[i].key >= cut })
		out = out[:n]
		if limit <= 0 || int64(len(out)) >= limit || cut == end {
			if limit > 0 && int64(len(out)) > limit {
				out = out[:limit]
			}
			return rev, out, nil
		}
		window *= 2
	}
}

// Item is one object of ListObjects: a stored row (Value, as the API
// server wrote it) or a served default (Default).
type Item struct {
	Key      string
	Revision int64
	Value    []byte
	// Object is a served default made already (a reader's own list);
	// ListObjects leaves it nil and lets Default make each one when it is
	// read.
	Object runtime.Object
	b      *Backend
	k      *kind
	p      *parent
}

// Default is the served default of the item, of the resource's v1 type and
// never shared with another Item; nil for a stored row. ListObjects makes
// no default before it is asked for: a watch cache fills from every
// default of a resource (300,000 config maps at 100,000 workspaces), and
// made all at once they would all be held until the last was converted.
func (it Item) Default() runtime.Object {
	if it.Object != nil || it.k == nil {
		return it.Object
	}
	return it.k.object(it.b, it.p)
}

// ListObjects lists [key, end) at the current revision as List does, with
// the served defaults handed as objects instead of encoded: for a reader
// in this process (the API server's watch caches fill themselves from it)
// that would only decode them again. The whole range of a kind of parent
// (every namespace) is read once with the lists of the defaults derived
// from it at the same revision (parentscan.go). ok is false for any other
// range without a served default (nothing to gain: read it as any other).
func (b *Backend) ListObjects(ctx context.Context, key, end string) (rev int64, items []Item, ok bool, err error) {
	for _, src := range []*source{namespaces, logicalClusters} {
		if key == src.prefix && end == src.end {
			return b.listParents(ctx, src)
		}
	}
	if end == "" || len(overlaps(key, end)) == 0 {
		return 0, nil, false, nil
	}
	rev, entries, err := b.merge(ctx, key, end, 0, 0)
	if err != nil {
		return rev, nil, true, err
	}
	items = make([]Item, len(entries))
	for i, e := range entries {
		if e.kv != nil {
			items[i] = Item{Key: e.key, Revision: e.kv.ModRevision, Value: e.kv.Value}
		} else {
			items[i] = Item{Key: e.key, Revision: e.p.createRev, b: b, k: e.k, p: e.p}
		}
	}
	return rev, items, true, nil
}

// listParents is ListObjects of every parent of src.
func (b *Backend) listParents(ctx context.Context, src *source) (int64, []Item, bool, error) {
	rev, err := b.Backend.CurrentRevision(ctx)
	if err != nil {
		return 0, nil, true, err
	}
	read, err := b.parents(ctx, src, src.prefix, src.end, 0, rev)
	if err != nil {
		return 0, nil, true, err
	}
	items := make([]Item, len(read.kvs))
	for i, kv := range read.kvs {
		items[i] = Item{Key: kv.Key, Revision: kv.ModRevision, Value: kv.Value}
	}
	return rev, items, true, nil
}

// clusterStart is where the parents whose defaults can sort at or after a
// key "<cluster>/..." begin: at the cluster's first, since a namespace
// whose name is a prefix of another's ("a" for "a-b") sorts before it but
// has its defaults after it.
func clusterStart(rest string) string {
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i+1]
	}
	return rest
}

func (b *Backend) ListStream(ctx context.Context, key, end string, limit, revision int64, only bool) kineserver.ListResult {
	if end == "" || len(overlaps(key, end)) == 0 {
		return b.Backend.ListStream(ctx, key, end, limit, revision, only)
	}
	rev, kvs, err := b.list(ctx, key, end, limit, revision, only)
	kvc := make(chan *kineserver.KeyValue, len(kvs))
	errc := make(chan error, 1)
	for _, kv := range kvs {
		kvc <- kv
	}
	close(kvc)
	errc <- err
	return kineserver.ListResult{CurrentRevision: rev, KVc: kvc, Errorc: errc}
}

// Count adds the parents whose defaults may fall in [key, end) to the rows
// there. It is an estimate (defaults that were changed count twice, deleted
// ones and those of terminating namespaces or of workspaces without an
// owner count once): kine uses it only for the remaining-item count of a
// paged list, an estimate in Kubernetes too.
func (b *Backend) Count(ctx context.Context, key, end string, revision int64) (int64, int64, error) {
	rev, n, err := b.Backend.Count(ctx, key, end, revision)
	if err != nil || end == "" {
		return rev, n, err
	}
	at := revision
	if at == 0 {
		at = rev
	}
	for _, k := range overlaps(key, end) {
		from, to := k.parentRange(max(key, k.prefix), min(end, k.end))
		_, c, err := b.Backend.Count(ctx, from, to, at)
		if err != nil {
			return rev, n, err
		}
		n += c
	}
	return rev, n, nil
}
