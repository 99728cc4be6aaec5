package clusterapf

import (
	"context"
	"testing"
	"time"
)

// TestTenantSlots: a tenant's requests beyond the bound wait for one of its
// own to end, another tenant's do not wait for them, a wait ends with its
// context, and an idle tenant leaves nothing behind.
func TestTenantSlots(t *testing.T) {
	s := newTenantSlots(2)
	ctx := context.Background()
	r1, ok1 := s.acquire(ctx, "root:a")
	r2, ok2 := s.acquire(ctx, "root:a")
	if !ok1 || !ok2 {
		t.Fatal("the first two requests of a tenant must not wait")
	}
	rb, ok := s.acquire(ctx, "root:b")
	if !ok {
		t.Fatal("another tenant's request waited for the first tenant's")
	}
	rb()

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, ok := s.acquire(short, "root:a"); ok {
		t.Fatal("a third request of a tenant with two executing did not wait")
	}

	got := make(chan func())
	go func() {
		r, ok := s.acquire(ctx, "root:a")
		if !ok {
			close(got)
			return
		}
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("a third request got a slot while two were held")
	case <-time.After(50 * time.Millisecond):
	}
	r1()
	var r3 func()
	select {
	case r3 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting request did not get the slot a finished one released")
	}
	r2()
	r3()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) != 0 {
		t.Errorf("idle tenants left %d entries", len(s.m))
	}
}
