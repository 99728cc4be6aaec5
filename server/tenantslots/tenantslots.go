// Package tenantslots bounds how many requests of one tenant (logical
// cluster) execute at once.
//
// Priority levels share seats, and fair queuing orders who gets the next
// seat, but a level with free seats lets one tenant's flow take as many as
// it has requests: sixteen concurrent writers of one tenant then held
// sixteen requests on the server's CPUs next to another tenant's one, and
// Go's scheduler shares CPU per goroutine, not per tenant, so the other
// tenant's small requests took several times as long. With at most a few
// requests of each tenant executing, a tenant's own requests queue behind
// each other and another tenant's get a fair share of the CPU.
//
// A request gives its slot back while it waits for an admission or
// conversion webhook (Yield, called by server/outbound): a tenant's webhook
// that calls back into its own workspace while handling requests must not
// find every slot held by requests waiting for it.
package tenantslots

import (
	"context"
	"net/http"
	"sync"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Slots are the slots of every tenant.
type Slots struct {
	limit int
	mu    sync.Mutex
	m     map[logicalcluster.Name]*slots
}

type slots struct {
	ch    chan struct{}
	users int // requests holding or waiting for a slot
}

// New returns Slots of limit per tenant (at least 1).
func New(limit int) *Slots {
	return &Slots{limit: max(limit, 1), m: map[logicalcluster.Name]*slots{}}
}

// acquire waits for one of cluster's slots, or until ctx ends (false).
// release must be called once when it returned true.
func (t *Slots) acquire(ctx context.Context, cluster logicalcluster.Name) (release func(), ok bool) {
	t.mu.Lock()
	s := t.m[cluster]
	if s == nil {
		s = &slots{ch: make(chan struct{}, t.limit)}
		t.m[cluster] = s
	}
	s.users++
	t.mu.Unlock()
	done := func() {
		t.mu.Lock()
		if s.users--; s.users == 0 {
			delete(t.m, cluster)
		}
		t.mu.Unlock()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; done() }, true
	case <-ctx.Done():
		done()
		return nil, false
	}
}

// Run waits for one of cluster's slots and runs f holding it. It reports
// false, without running f, if ctx ended first.
func (t *Slots) Run(ctx context.Context, cluster logicalcluster.Name, f func()) bool {
	release, ok := t.acquire(ctx, cluster)
	if !ok {
		return false
	}
	h, _ := ctx.Value(holderKey{}).(*holder)
	if h == nil {
		defer release()
		f()
		return true
	}
	h.mu.Lock()
	h.slots, h.cluster, h.release = t, cluster, release
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		r := h.release
		h.slots, h.release = nil, nil
		h.mu.Unlock()
		if r != nil {
			r()
		}
	}()
	f()
	return true
}

// RunUnheld is Run without the request's holder: the slot is not given
// back by Yield (for watches, whose slot bounds their start-up).
func (t *Slots) RunUnheld(ctx context.Context, cluster logicalcluster.Name, f func()) bool {
	release, ok := t.acquire(ctx, cluster)
	if !ok {
		return false
	}
	defer release()
	f()
	return true
}

type holderKey struct{}

// holder is a request's slot, if it holds one.
type holder struct {
	mu       sync.Mutex
	slots    *Slots
	cluster  logicalcluster.Name
	release  func() // nil while yielded or not held
	yielding int    // Yields under way
}

// WithHolder gives each request a place for its slot, so that Yield can
// find it: it must wrap the handler in which Run is called (API priority
// and fairness).
func WithHolder(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), holderKey{}, &holder{})))
	})
}

// Yield gives back the slot of ctx's request, if it holds one, and returns
// the function that takes one again (waiting, unless ctx ends): call it
// when the wait that yielded is over. Concurrent yields of one request (a
// request's validating webhooks are called in parallel) take the slot
// again when the last ends.
func Yield(ctx context.Context) (resume func()) {
	h, _ := ctx.Value(holderKey{}).(*holder)
	if h == nil {
		return func() {}
	}
	h.mu.Lock()
	if h.slots == nil {
		h.mu.Unlock()
		return func() {}
	}
	h.yielding++
	release := h.release
	h.release = nil
	h.mu.Unlock()
	if release != nil {
		release()
	}
	return func() {
		h.mu.Lock()
		h.yielding--
		last, t, cluster := h.yielding == 0, h.slots, h.cluster
		h.mu.Unlock()
		if !last || t == nil {
			return
		}
		r, ok := t.acquire(ctx, cluster)
		if !ok {
			return // the request is over; it holds nothing
		}
		h.mu.Lock()
		if h.slots == nil || h.release != nil || h.yielding > 0 {
			h.mu.Unlock()
			r() // the request ended, or yielded again, meanwhile
			return
		}
		h.release = r
		h.mu.Unlock()
	}
}
