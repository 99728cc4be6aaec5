package serveddefaults

import (
	"context"
	"errors"
	"sync"
	"time"

	kineserver "github.com/k3s-io/kine/pkg/server"
	"k8s.io/klog/v2"
)

// A list of the service accounts and one of the config maps of all
// clusters both read every namespace: the watch caches of the two fill at
// the same moment at start-up, at the same revision, and each read and
// parsed every namespace again (at 100,000 workspaces, 300,000 rows, a
// quarter of the served defaults' share of a restart). Scans of the same
// parents, range, window and revision share one read: callers that arrive
// while it runs, or within scanLinger of its end, take its result. What a
// revision holds never changes, so a shared result is as right as one's
// own; nothing is kept once the linger is over.

// scanLinger is how long a finished scan stays for a caller at the same
// revision (the other fill, started a moment later).
const scanLinger = 2 * time.Second

type scanKey struct {
	src        *source
	from, to   string
	window, at int64
}

// scanned is one scan's result: the parents read, in key order (rows that
// are not parents are left out), how many rows were read, and the key of
// the last one.
type scanned struct {
	parents []*parent
	rows    int
	lastKey string
	kvs     []*kineserver.KeyValue // the rows read
}

type scan struct {
	done chan struct{}
	res  scanned
	err  error
}

// scans holds the scans in flight or lingering.
type scans struct {
	sync.Mutex
	m map[scanKey]*scan
}

// parents reads the parents of src in [from, to) at revision at (window
// rows at most, 0: all), sharing the read with concurrent callers.
func (b *Backend) parents(ctx context.Context, src *source, from, to string, window, at int64) (scanned, error) {
	k := scanKey{src: src, from: from, to: to, window: window, at: at}
	b.scans.Lock()
	if s, ok := b.scans.m[k]; ok {
		b.scans.Unlock()
		select {
		case <-s.done:
		case <-ctx.Done():
			return scanned{}, ctx.Err()
		}
		// The reader's own context may have ended its read; that is not
		// this caller's answer.
		if s.err == nil || !(errors.Is(s.err, context.Canceled) || errors.Is(s.err, context.DeadlineExceeded)) {
			klog.V(2).InfoS("served defaults: parents read once for two lists", "prefix", src.prefix, "revision", at, "parents", s.res.rows)
			return s.res, s.err
		}
		return b.readParents(ctx, src, from, to, window, at)
	}
	if b.scans.m == nil {
		b.scans.m = map[scanKey]*scan{}
	}
	s := &scan{done: make(chan struct{})}
	b.scans.m[k] = s
	b.scans.Unlock()
	s.res, s.err = b.readParents(ctx, src, from, to, window, at)
	forget := func() {
		b.scans.Lock()
		defer b.scans.Unlock()
		if b.scans.m[k] == s {
			delete(b.scans.m, k)
		}
	}
	if s.err != nil {
		forget() // a failure is told to those waiting, not to later callers
	} else {
		time.AfterFunc(scanLinger, forget)
	}
	close(s.done)
	return s.res, s.err
}

func (b *Backend) readParents(ctx context.Context, src *source, from, to string, window, at int64) (scanned, error) {
	_, rows, err := b.Backend.List(ctx, from, to, window, at, false)
	if err != nil {
		return scanned{}, err
	}
	res := scanned{parents: make([]*parent, 0, len(rows)), rows: len(rows), kvs: rows}
	for _, kv := range rows {
		if p := parentOf(kv); p != nil && p.src == src {
			res.parents = append(res.parents, p)
		}
	}
	if len(rows) > 0 {
		res.lastKey = rows[len(rows)-1].Key
	}
	return res, nil
}
