package clusterapf

import (
	"context"
	"sync"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// tenantSlots bounds how many requests of one tenant execute at once.
//
// Priority levels share seats, and fair queuing orders who gets the next
// seat, but a level with free seats lets one tenant's flow take as many as
// it has requests: sixteen concurrent writers of one tenant then held
// sixteen requests on the server's CPUs next to another tenant's one, and
// Go's scheduler shares CPU per goroutine, not per tenant, so the other
// tenant's small requests took about sixteen times as long. With at most a
// few requests of each tenant executing, a tenant's own requests queue
// behind each other and another tenant's get a fair share of the CPU.
type tenantSlots struct {
	limit int
	mu    sync.Mutex
	m     map[logicalcluster.Name]*slots
}

type slots struct {
	ch    chan struct{}
	users int // requests holding or waiting for a slot
}

func newTenantSlots(limit int) *tenantSlots {
	return &tenantSlots{limit: limit, m: map[logicalcluster.Name]*slots{}}
}

// acquire waits for one of cluster's slots, or until ctx ends (false).
// release must be called once when it returned true.
func (t *tenantSlots) acquire(ctx context.Context, cluster logicalcluster.Name) (release func(), ok bool) {
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
