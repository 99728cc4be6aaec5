package clusterinformer

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Delays between watches that the server ended before they delivered
// anything: a server that keeps ending watches at once is not asked again
// in a tight loop.
const (
	resumeFirstDelay = 50 * time.Millisecond
	resumeMaxDelay   = 2 * time.Second
)

// resumeWatch watches lw from o.ResourceVersion and, whenever the server
// ends the watch without an error, watches again from the last
// resourceVersion delivered, so that the caller sees one watch.
//
// Why: the API server's watch cache ends a watch whose client falls behind
// by more than a few dozen events for longer than its dispatch budget
// (about 100 ms; upstream's "Forcing watcher close due to
// unresponsiveness"). With the server busy, an informer across clusters is
// such a client during a burst of writes. client-go's reflector resumes a
// watch that ended after delivering something, but one that ends within a
// second without an event is a "very short watch", and the reflector then
// lists the resource again: every object of every cluster (at 100,000
// workspaces, 300,000 namespaces or config maps), each time the server is
// busy. Watching again from the last resourceVersion delivers the same
// events in the same order (a watch from a resourceVersion delivers every
// later change), without the list.
//
// Errors are not hidden: an error from establishing a later watch (as an
// error event when the server answered with a status, such as 410 Gone for
// a resourceVersion the watch cache no longer holds) and every error event
// reach the caller, and the watch ends after them, as the reflector expects.
// A watch from "" or "0" (the current state first) is not resumed: it has
// no resourceVersion that means "after what was delivered".
func resumeWatch(ctx context.Context, lw cache.ListerWatcherWithContext, o metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.WatchWithContext(ctx, o)
	if err != nil || o.ResourceVersion == "" || o.ResourceVersion == "0" {
		return w, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &resumingWatch{lw: lw, opts: o, result: make(chan watch.Event), cancel: cancel}
	go r.run(ctx, w)
	return r, nil
}

type resumingWatch struct {
	lw     cache.ListerWatcherWithContext
	opts   metav1.ListOptions
	result chan watch.Event
	cancel context.CancelFunc
}

func (r *resumingWatch) ResultChan() <-chan watch.Event { return r.result }
func (r *resumingWatch) Stop()                          { r.cancel() }

func (r *resumingWatch) run(ctx context.Context, w watch.Interface) {
	defer close(r.result)
	var delay time.Duration
	for {
		delivered, ended := r.forward(ctx, w)
		w.Stop()
		if ended {
			return
		}
		if delivered {
			delay = 0
		} else {
			delay = min(max(2*delay, resumeFirstDelay), resumeMaxDelay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		var err error
		if w, err = r.lw.WatchWithContext(ctx, r.opts); err != nil {
			klog.V(2).InfoS("Watching again after the server ended a watch failed", "resourceVersion", r.opts.ResourceVersion, "err", err)
			var s apierrors.APIStatus
			if errors.As(err, &s) {
				status := s.Status()
				r.send(ctx, watch.Event{Type: watch.Error, Object: &status})
			}
			// Anything else (the server went away): the watch ends,
			// and the reflector decides what to do next, as without
			// this wrapper.
			return
		}
	}
}

// forward passes w's events on until w ends (ended false: the server ended
// it, resume), an error event was passed on, or the caller stopped (ended
// true). It records the resourceVersion of every event passed on.
func (r *resumingWatch) forward(ctx context.Context, w watch.Interface) (delivered, ended bool) {
	for {
		select {
		case <-ctx.Done():
			return delivered, true
		case ev, ok := <-w.ResultChan():
			if !ok {
				return delivered, false
			}
			if !r.send(ctx, ev) {
				return delivered, true
			}
			if ev.Type == watch.Error {
				return delivered, true
			}
			delivered = true
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				r.opts.ResourceVersion = m.GetResourceVersion()
			}
		}
	}
}

func (r *resumingWatch) send(ctx context.Context, ev watch.Event) bool {
	select {
	case r.result <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}
