package embeddedkine

import (
	"context"
	"errors"
	"sync"

	kineserver "github.com/k3s-io/kine/pkg/server"
)

// fanout is the backend with one watch of the datastore shared by every
// watch. kine's backend gives each watch its own chain of goroutines
// (its broadcaster's subscription, LogStructured's forwarder, the
// served-defaults transform) and its server one more; every batch of
// events woke all of them for each of the API server's watches (one per
// resource, about fifty), whether or not the batch held a key they watch.
// During workspace creation those wake-ups were most of what kept the
// scheduler's run queue long, and every write waited in it.
//
// Here one upstream watch (from the current revision) reads each batch
// once and hands it to every watch's channel under one lock: no goroutine
// per watch besides kine server's own. A watch from an older revision
// reads its history as before, through a watch of its own that ends as
// soon as that history is read; the shared stream continues it.
//
// What a watch receives is what the backend's own watch gives: a first
// batch with the events after its revision up to a revision C, then every
// later batch without the events up to C. It is registered with the
// shared stream before its history is read, so the stream's batches after
// that moment (which start at or before C) are all kept for it.
type fanout struct {
	kineserver.Backend

	mu     sync.Mutex
	stream *sharedStream // nil or ended: the next watch starts one
}

func newFanout(b kineserver.Backend) *fanout { return &fanout{Backend: b} }

// subCapacity is how many batches a watch may have waiting before it is
// ended as too slow; the API server then watches again from the last
// revision it saw. kine's own chain held up to 300 (its broadcaster's
// 100, LogStructured's 100, the served-defaults transform's 100).
const subCapacity = 300

type sharedStream struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	subs   map[*fanoutSub]struct{}
	ended  bool
	err    error // why the upstream watch ended, if it said
}

type fanoutSub struct {
	events chan kineserver.EventBatch
	errc   chan error
	// armed is set once the watch's history is in events; before that
	// the stream's batches wait in pending.
	armed   bool
	pending []kineserver.EventBatch
	after   int64 // events up to this revision came with the history
	closed  bool
	stop    func() bool // stops the context.AfterFunc
}

func (f *fanout) Watch(ctx context.Context, revision int64) kineserver.WatchResult {
	s := f.sharedStream()
	if s == nil {
		return f.Backend.Watch(ctx, revision)
	}
	sub := &fanoutSub{events: make(chan kineserver.EventBatch, subCapacity), errc: make(chan error, 1)}
	if !s.add(sub) {
		return f.Backend.Watch(ctx, revision)
	}

	// The history, through a watch of its own: its first batch.
	hctx, hcancel := context.WithCancel(ctx)
	wr := f.Backend.Watch(hctx, revision)
	first, ok := <-wr.Eventc
	hcancel()
	for range wr.Eventc { // let the history watch's goroutines finish
	}
	var herr error
	select {
	case herr = <-wr.Errorc:
		if errors.Is(herr, context.Canceled) && ctx.Err() == nil {
			herr = nil // our own hcancel
		}
	default:
	}
	if !ok || herr != nil || wr.CompactRevision != 0 || ctx.Err() != nil {
		// Compacted, failed or abandoned: answer as the backend did,
		// without the shared stream.
		s.remove(sub, nil)
		errc := make(chan error, 1)
		if herr != nil {
			errc <- herr
		}
		ended := endedWatch(wr, first, ok, errc)
		ended.CompactRevision = wr.CompactRevision
		return ended
	}
	if !s.arm(ctx, sub, first) {
		// The shared stream ended meanwhile: the history, then the end
		// of the watch; the client watches again from its last revision.
		return endedWatch(wr, first, true, sub.errc)
	}
	return kineserver.WatchResult{CurrentRevision: wr.CurrentRevision, Eventc: sub.events, Errorc: sub.errc}
}

// endedWatch answers a watch with its history batch (if it has one) and
// then its end, kine's server reading errc once the events end.
func endedWatch(wr kineserver.WatchResult, first kineserver.EventBatch, hasFirst bool, errc chan error) kineserver.WatchResult {
	events := make(chan kineserver.EventBatch, 1)
	if hasFirst {
		events <- first
	}
	close(events)
	return kineserver.WatchResult{CurrentRevision: wr.CurrentRevision, Eventc: events, Errorc: errc}
}

// sharedStream returns the running shared stream, starting one if there
// is none (nil if the backend's watch could not start).
func (f *fanout) sharedStream() *sharedStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stream != nil {
		f.stream.mu.Lock()
		ended := f.stream.ended
		f.stream.mu.Unlock()
		if !ended {
			return f.stream
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	wr := f.Backend.Watch(ctx, 0)
	if wr.Eventc == nil {
		cancel()
		return nil
	}
	s := &sharedStream{cancel: cancel, subs: map[*fanoutSub]struct{}{}}
	go s.run(wr)
	f.stream = s
	return s
}

// run hands each upstream batch to every watch, then ends them all when
// the upstream watch ends.
func (s *sharedStream) run(wr kineserver.WatchResult) {
	for batch := range wr.Eventc {
		s.mu.Lock()
		for sub := range s.subs {
			if !sub.armed {
				sub.pending = append(sub.pending, batch)
				continue
			}
			s.send(sub, batch)
		}
		s.mu.Unlock()
	}
	var err error
	select {
	case err = <-wr.Errorc:
	default:
	}
	s.mu.Lock()
	s.ended, s.err = true, err
	for sub := range s.subs {
		s.closeSub(sub, err)
	}
	s.mu.Unlock()
	s.cancel()
}

// send hands one batch to an armed watch, without what its history
// already held; a watch whose channel is full is ended (s.mu held).
func (s *sharedStream) send(sub *fanoutSub, batch kineserver.EventBatch) {
	b := batch.After(sub.after)
	if len(b.Events) == 0 && b.CurrentRev <= sub.after {
		return // all of it came with the history
	}
	select {
	case sub.events <- b:
	default:
		s.closeSub(sub, nil)
	}
}

func (s *sharedStream) add(sub *fanoutSub) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.subs[sub] = struct{}{}
	return true
}

// arm puts the history first and the batches that came meanwhile after it.
// It reports false if the watch had ended before (the shared stream did).
func (s *sharedStream) arm(ctx context.Context, sub *fanoutSub, first kineserver.EventBatch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.closed {
		return false
	}
	sub.stop = context.AfterFunc(ctx, func() { s.remove(sub, nil) })
	sub.events <- first // the channel is empty and has room
	sub.after = first.CurrentRev
	sub.armed = true
	pending := sub.pending
	sub.pending = nil
	for _, b := range pending {
		if sub.closed {
			break
		}
		s.send(sub, b)
	}
	if s.ended && !sub.closed {
		s.closeSub(sub, s.err)
	}
	return true
}

func (s *sharedStream) remove(sub *fanoutSub, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeSub(sub, err)
}

// closeSub ends one watch (s.mu held): its error, if any, then the end of
// its events, which kine's server reads as the end of the watch.
func (s *sharedStream) closeSub(sub *fanoutSub, err error) {
	delete(s.subs, sub)
	if sub.closed {
		return
	}
	sub.closed = true
	sub.pending = nil
	if err != nil {
		sub.errc <- err
	}
	close(sub.events)
	if sub.stop != nil {
		sub.stop()
	}
}
