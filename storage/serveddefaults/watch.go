package serveddefaults

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	kineserver "github.com/k3s-io/kine/pkg/server"
	"k8s.io/klog/v2"
)

// Watch shows the served defaults' changes among kine's events: see the
// package comment. kine's watch is one stream of every key (its server
// filters by range), so namespace events and default events arrive in
// revision order and the served events are put right after the event of
// the namespace (or LogicalCluster) they derive from, at its revision.
func (b *Backend) Watch(ctx context.Context, revision int64) kineserver.WatchResult {
	wr := b.Backend.Watch(ctx, revision)
	out := make(chan kineserver.EventBatch, cap(wr.Eventc))
	errc := make(chan error, 1)
	in, kineErrc := wr.Eventc, wr.Errorc
	wr.Eventc, wr.Errorc = out, errc
	drain := func() {
		for range in {
		}
	}
	go func() {
		// kine's server reads the error once the events end.
		defer close(out)
		for batch := range in {
			events, err := b.transformShared(ctx, batch.Events)
			if err != nil {
				// A read the events needed is impossible (its revision
				// was compacted) or the watch ended: end it with the
				// error rather than send events with some missing; the
				// client watches again from its last revision.
				errc <- err
				go drain()
				return
			}
			batch.Events = events
			select {
			case out <- batch:
			case <-ctx.Done():
				// The reader is gone; let kine's sender finish.
				drain()
				return
			}
		}
		select {
		case err := <-kineErrc:
			errc <- err
		default:
		}
	}()
	return wr
}

// transformShared transforms a batch once for all watches: kine hands the
// same batch to every watch that is caught up (one per watched resource,
// dozens in all), so the served objects of a new namespace are encoded, and
// the reads some events need are made, once rather than once per watch.
func (b *Backend) transformShared(ctx context.Context, events []*kineserver.Event) ([]*kineserver.Event, error) {
	if len(events) == 0 {
		return events, nil
	}
	key := memoKey{first: events[0], n: len(events)}
	b.memo.Lock()
	for i := range b.memo.keys {
		if b.memo.keys[i] == key {
			out := b.memo.vals[i]
			b.memo.Unlock()
			return out, nil
		}
	}
	b.memo.Unlock()
	out, err := b.transform(ctx, events)
	if err != nil {
		return nil, err
	}
	b.memo.Lock()
	b.memo.keys[b.memo.next], b.memo.vals[b.memo.next] = key, out
	b.memo.next = (b.memo.next + 1) % len(b.memo.keys)
	b.memo.Unlock()
	return out, nil
}

// memoKey names a batch: its first event (allocated once, shared by every
// watch that gets the batch) and its length.
type memoKey struct {
	first *kineserver.Event
	n     int
}

// memo holds the latest transformed batches.
type memo struct {
	sync.Mutex
	keys [8]memoKey
	vals [8][]*kineserver.Event
	next int
}

func (b *Backend) transform(ctx context.Context, events []*kineserver.Event) ([]*kineserver.Event, error) {
	var out []*kineserver.Event
	changed := false
	for i, e := range events {
		if e == nil || e.KV == nil {
			continue
		}
		var extra []*kineserver.Event
		var err error
		replace, drop := e, false
		if src := sourceOf(e.KV.Key); src != nil {
			extra, err = b.parentEvent(ctx, src, e)
		} else if k, pr, ok := defaultOf(e.KV.Key); ok {
			replace, drop, err = b.defaultEvent(ctx, k, pr, e)
		}
		if err != nil {
			return nil, err
		}
		if !changed && (len(extra) > 0 || drop || replace != e) {
			changed = true
			out = append(make([]*kineserver.Event, 0, len(events)+len(extra)), events[:i]...)
		}
		if !changed {
			continue
		}
		if !drop {
			out = append(out, replace)
		}
		out = append(out, extra...)
	}
	if !changed {
		return events, nil
	}
	// Full: kine's watch loop appends later batches to this slice, and
	// every watch shares it (transformShared).
	return out[:len(out):len(out)], nil
}

func sourceOf(key string) *source {
	for _, s := range []*source{namespaces, logicalClusters} {
		if strings.HasPrefix(key, s.prefix) {
			return s
		}
	}
	return nil
}

// parentEvent gives the served defaults' events that an event of a
// namespace or LogicalCluster causes: ADDED when it starts to serve them,
// DELETED when it stops.
func (b *Backend) parentEvent(ctx context.Context, src *source, e *kineserver.Event) ([]*kineserver.Event, error) {
	var was, is *parent
	switch {
	case e.Create:
		is = parentOf(e.KV)
	case e.Delete:
		was = parentOf(e.PrevKV)
	default:
		if src != namespaces || !mayTerminate(e) {
			return nil, nil // a LogicalCluster serves its defaults while it exists
		}
		was, is = parentOf(e.PrevKV), parentOf(e.KV)
	}
	wasActive, isActive := was != nil && was.active, is != nil && is.active
	if wasActive == isActive {
		return nil, nil
	}
	var out []*kineserver.Event
	for _, k := range kinds {
		if k.src != src {
			continue
		}
		if isActive {
			// A new parent: nothing is stored at its defaults' keys but,
			// at most, tombstones of an earlier one of the same name.
			kv := b.served(k, is)
			if kv == nil {
				continue
			}
			kv.CreateRevision, kv.ModRevision = e.KV.ModRevision, e.KV.ModRevision
			out = append(out, &kineserver.Event{Create: true, KV: kv})
			continue
		}
		// Terminating or gone: the default goes unless it is a row (which
		// will have its own delete) or was deleted already.
		prev := b.served(k, was)
		if prev == nil {
			continue
		}
		stored, err := b.readAt(ctx, prev.Key, e.KV.ModRevision)
		if err != nil {
			return nil, err
		}
		if hides(stored, was) {
			continue
		}
		gone := *prev
		gone.ModRevision = e.KV.ModRevision
		out = append(out, &kineserver.Event{Delete: true, KV: &gone, PrevKV: prev})
	}
	return out, nil
}

// readAt reads key at revision for a watch, as kine's own watch reads the
// log: while the datastore fails it tries again, with growing pauses, so
// the watch waits rather than ends (every watch reads the same batch at
// the same moment: ending them all at once is what a datastore fault must
// not cause). Only a compacted revision or the end of the watch is an
// error.
func (b *Backend) readAt(ctx context.Context, key string, revision int64) (*kineserver.KeyValue, error) {
	pause := 50 * time.Millisecond
	for {
		_, kv, err := b.Backend.Get(ctx, key, revision, false)
		if err == nil || errors.Is(err, kineserver.ErrCompacted) {
			return kv, err
		}
		klog.V(2).InfoS("served defaults: a read for a watch failed; trying again", "key", key, "revision", revision, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// mayTerminate says cheaply whether an update of a namespace can have
// changed whether it is terminating: only one that sets its deletion
// timestamp or phase.
func mayTerminate(e *kineserver.Event) bool {
	if e.PrevKV == nil {
		return true
	}
	return strings.Contains(string(e.KV.Value), `"deletionTimestamp"`) != strings.Contains(string(e.PrevKV.Value), `"deletionTimestamp"`) ||
		strings.Contains(string(e.KV.Value), `"Terminating"`) != strings.Contains(string(e.PrevKV.Value), `"Terminating"`)
}

// defaultEvent rewrites a stored event at a default's key as clients see
// it, or drops it (drop true) when clients see no change.
func (b *Backend) defaultEvent(ctx context.Context, k *kind, parentRest string, e *kineserver.Event) (*kineserver.Event, bool, error) {
	prevStored := e.PrevKV
	if e.Create {
		prevStored = nil
	}
	prevRow := prevStored != nil && !isTombstone(prevStored)
	nowTomb := !e.Delete && isTombstone(e.KV)
	if prevRow && !nowTomb {
		return e, false, nil // an ordinary update or delete of a row
	}
	if e.Delete && isTombstone(prevStored) {
		return nil, true, nil // a tombstone cleared: the default was gone already
	}
	if e.Delete {
		return e, false, nil
	}
	// The value before, as clients saw it: the row, or the served object.
	var prev *kineserver.KeyValue
	if prevRow {
		prev = prevStored
	} else {
		pkv, err := b.readAt(ctx, k.src.prefix+parentRest, e.KV.ModRevision)
		if err != nil {
			return nil, false, err
		}
		if p := parentOf(pkv); p != nil && p.active && !hides(prevStored, p) {
			prev = b.served(k, p)
		}
	}
	switch {
	case nowTomb && prev == nil:
		return nil, true, nil
	case nowTomb:
		gone := *prev
		gone.ModRevision = e.KV.ModRevision
		return &kineserver.Event{Delete: true, KV: &gone, PrevKV: prev}, false, nil
	case prev == nil:
		kv := *e.KV
		kv.CreateRevision = kv.ModRevision
		return &kineserver.Event{Create: true, KV: &kv}, false, nil
	}
	kv := *e.KV
	kv.CreateRevision = prev.CreateRevision
	return &kineserver.Event{KV: &kv, PrevKV: prev}, false, nil
}
