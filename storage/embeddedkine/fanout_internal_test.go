package embeddedkine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kineserver "github.com/k3s-io/kine/pkg/server"
)

// historyBackend is a backend whose watch from the current revision is
// the test's live channel and whose watch from an older revision returns
// its history only once the test releases it.
type historyBackend struct {
	kineserver.Backend
	live    chan kineserver.EventBatch
	liveErr chan error
	release chan int64 // the revision the history reaches
	started bool       // the live watch was handed out
}

func events(from, to int64) []*kineserver.Event {
	var out []*kineserver.Event
	for r := from; r <= to; r++ {
		out = append(out, &kineserver.Event{KV: &kineserver.KeyValue{Key: fmt.Sprintf("/k/%d", r), ModRevision: r}})
	}
	return out
}

func (h *historyBackend) Watch(ctx context.Context, revision int64) kineserver.WatchResult {
	if revision == 0 && !h.started {
		h.started = true
		return kineserver.WatchResult{CurrentRevision: 10, Eventc: h.live, Errorc: h.liveErr}
	}
	to := int64(10) // a watch from now: no history
	if revision != 0 {
		to = <-h.release
	}
	ch := make(chan kineserver.EventBatch, 1)
	var history []*kineserver.Event
	if revision != 0 {
		history = events(revision, to)
	}
	ch <- kineserver.EventBatch{Events: history, CurrentRev: to}
	go func() { <-ctx.Done(); close(ch) }()
	return kineserver.WatchResult{CurrentRevision: to, Eventc: ch, Errorc: make(chan error, 1)}
}

func revisions(t *testing.T, ch <-chan kineserver.EventBatch, n int) []int64 {
	t.Helper()
	var out []int64
	for len(out) < n {
		select {
		case b, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended after %v", out)
			}
			for _, e := range b.Events {
				out = append(out, e.KV.ModRevision)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("after %v: nothing more", out)
		}
	}
	return out
}

// TestFanoutHistoryMeetsStream: a watch whose history is being read while
// the shared stream moves on gets its history, then exactly the streamed
// events after it; watches end with the stream's error when it ends, a
// watch too slow to read is ended alone, and a cancelled watch's events
// end.
func TestFanoutHistoryMeetsStream(t *testing.T) {
	h := &historyBackend{live: make(chan kineserver.EventBatch, 10), liveErr: make(chan error, 1), release: make(chan int64)}
	f := newFanout(h)
	ctx := context.Background()
	a := f.Watch(ctx, 0)
	if a.CurrentRevision != 10 {
		t.Fatalf("a watch from now starts at %d, want 10", a.CurrentRevision)
	}
	h.live <- kineserver.EventBatch{CurrentRev: 10} // the upstream watch's first batch

	// b reads its history from 5 while 11-13 and 14-16 stream past.
	bc := make(chan kineserver.WatchResult)
	go func() { bc <- f.Watch(ctx, 5) }()
	for subs := 0; subs < 2; { // b is registered before its history is read
		time.Sleep(time.Millisecond)
		f.stream.mu.Lock()
		subs = len(f.stream.subs)
		f.stream.mu.Unlock()
	}
	h.live <- kineserver.EventBatch{Events: events(11, 13), CurrentRev: 13}
	h.live <- kineserver.EventBatch{Events: events(14, 16), CurrentRev: 16}
	if got := revisions(t, a.Eventc, 6); fmt.Sprint(got) != "[11 12 13 14 15 16]" {
		t.Fatalf("a: %v", got)
	}
	h.release <- 15 // b's history reaches 15
	b := <-bc
	h.live <- kineserver.EventBatch{Events: events(17, 17), CurrentRev: 17}
	if got := revisions(t, b.Eventc, 13); fmt.Sprint(got) != "[5 6 7 8 9 10 11 12 13 14 15 16 17]" {
		t.Fatalf("b: %v; want its history 5-15, then 16 and 17 once each", got)
	}
	if got := revisions(t, a.Eventc, 1); fmt.Sprint(got) != "[17]" {
		t.Fatalf("a: %v", got)
	}

	// A cancelled watch's events end; the others go on.
	cctx, cancel := context.WithCancel(ctx)
	go func() { h.release <- 17 }()
	c := f.Watch(cctx, 17)
	cancel()
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-c.Eventc:
		case <-deadline:
			t.Fatal("a cancelled watch's events did not end")
		}
	}

	// A watch that does not read is ended when its queue is full; a
	// reader is not.
	go func() { h.release <- 17 }()
	slow := f.Watch(ctx, 17)
	<-slow.Eventc // its history
	for r := int64(18); r < 18+subCapacity+1; r++ {
		h.live <- kineserver.EventBatch{Events: events(r, r), CurrentRev: r}
		if got := revisions(t, a.Eventc, 1); got[0] != r {
			t.Fatalf("a got %v, want %d", got, r)
		}
	}
	// The last sends may still be on their way: wait until only a (which
	// reads) is left; b, which stopped reading, is ended too.
	for subs := 0; subs != 1; {
		time.Sleep(time.Millisecond)
		f.stream.mu.Lock()
		subs = len(f.stream.subs)
		f.stream.mu.Unlock()
	}
	n := 0
	for open := true; open; {
		select {
		case _, open = <-slow.Eventc:
			if open {
				n++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the slow watch was not ended: %d batches read", n)
		}
	}
	if n != subCapacity {
		t.Fatalf("the slow watch got %d batches before it ended, want %d", n, subCapacity)
	}

	// The stream's end ends every watch, with its error.
	boom := errors.New("datastore gone")
	h.liveErr <- boom
	close(h.live)
	for range a.Eventc {
	}
	if err := <-a.Errorc; !errors.Is(err, boom) {
		t.Fatalf("a ended with %v, want %v", err, boom)
	}
}
