package serveddefaults

import (
	"context"
	"strings"

	kineserver "github.com/k3s-io/kine/pkg/server"
)

// Watch shows the served defaults' changes among kine's events: see the
// package comment. kine's watch is one stream of every key (its server
// filters by range), so namespace events and default events arrive in
// revision order and the served events are put right after the namespace
// event they derive from, at its revision.
func (b *Backend) Watch(ctx context.Context, revision int64) kineserver.WatchResult {
	wr := b.Backend.Watch(ctx, revision)
	out := make(chan kineserver.EventBatch, cap(wr.Eventc))
	in := wr.Eventc
	wr.Eventc = out
	go func() {
		defer close(out)
		for batch := range in {
			batch.Events = b.transform(ctx, batch.Events)
			select {
			case out <- batch:
			case <-ctx.Done():
				// The reader is gone; let kine's sender finish.
				for range in {
				}
				return
			}
		}
	}()
	return wr
}

func (b *Backend) transform(ctx context.Context, events []*kineserver.Event) []*kineserver.Event {
	var out []*kineserver.Event
	changed := false
	for i, e := range events {
		if e == nil || e.KV == nil {
			continue
		}
		var extra []*kineserver.Event
		replace, drop := e, false
		if strings.HasPrefix(e.KV.Key, nsPrefix) {
			extra = b.namespaceEvent(ctx, e)
		} else if k, nsRest, ok := defaultOf(e.KV.Key); ok {
			replace, drop = b.defaultEvent(ctx, k, nsRest, e)
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
		return events
	}
	return out
}

// namespaceEvent gives the served defaults' events that a namespace event
// causes: ADDED when it starts to serve them, DELETED when it stops.
func (b *Backend) namespaceEvent(ctx context.Context, e *kineserver.Event) []*kineserver.Event {
	var was, is *namespace
	switch {
	case e.Create:
		is = parseNamespace(e.KV)
	case e.Delete:
		was = parseNamespace(e.PrevKV)
	default:
		if !mayTerminate(e) {
			return nil
		}
		was, is = parseNamespace(e.PrevKV), parseNamespace(e.KV)
	}
	wasActive, isActive := was != nil && was.active, is != nil && is.active
	if wasActive == isActive {
		return nil
	}
	var out []*kineserver.Event
	for _, k := range kinds {
		if isActive {
			// A new namespace: nothing is stored at its defaults' keys
			// but, at most, tombstones of an earlier namespace of the name.
			kv := b.served(k, is)
			kv.CreateRevision, kv.ModRevision = e.KV.ModRevision, e.KV.ModRevision
			out = append(out, &kineserver.Event{Create: true, KV: kv})
			continue
		}
		// Terminating or gone: the default goes unless it is a row (which
		// will have its own delete) or was deleted already.
		_, stored, err := b.Backend.Get(ctx, k.key(was.rest), e.KV.ModRevision, false)
		if err != nil || hides(stored, was) {
			continue
		}
		prev := b.served(k, was)
		gone := *prev
		gone.ModRevision = e.KV.ModRevision
		out = append(out, &kineserver.Event{Delete: true, KV: &gone, PrevKV: prev})
	}
	return out
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
func (b *Backend) defaultEvent(ctx context.Context, k *kind, nsRest string, e *kineserver.Event) (*kineserver.Event, bool) {
	prevStored := e.PrevKV
	if e.Create {
		prevStored = nil
	}
	prevRow := prevStored != nil && !isTombstone(prevStored)
	nowTomb := !e.Delete && isTombstone(e.KV)
	if prevRow && !nowTomb {
		return e, false // an ordinary update or delete of a row
	}
	if e.Delete && isTombstone(prevStored) {
		return nil, true // a tombstone cleared: the default was gone already
	}
	if e.Delete {
		return e, false
	}
	// The value before, as clients saw it: the row, or the served object.
	var prev *kineserver.KeyValue
	if prevRow {
		prev = prevStored
	} else if _, nskv, err := b.Backend.Get(ctx, nsPrefix+nsRest, e.KV.ModRevision, false); err == nil {
		if ns := parseNamespace(nskv); ns != nil && ns.active && !hides(prevStored, ns) {
			prev = b.served(k, ns)
		}
	}
	switch {
	case nowTomb && prev == nil:
		return nil, true
	case nowTomb:
		gone := *prev
		gone.ModRevision = e.KV.ModRevision
		return &kineserver.Event{Delete: true, KV: &gone, PrevKV: prev}, false
	case prev == nil:
		kv := *e.KV
		kv.CreateRevision = kv.ModRevision
		return &kineserver.Event{Create: true, KV: &kv}, false
	}
	kv := *e.KV
	kv.CreateRevision = prev.CreateRevision
	return &kineserver.Event{KV: &kv, PrevKV: prev}, false
}
