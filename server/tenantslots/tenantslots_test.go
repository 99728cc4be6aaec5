package tenantslots

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSlots: a tenant's requests beyond the bound wait for one of its own
// to end, another tenant's do not wait for them, a wait ends with its
// context, and an idle tenant leaves nothing behind.
func TestSlots(t *testing.T) {
	s := New(2)
	ctx := context.Background()
	r1, ok1 := s.acquire(ctx, "root:a")
	r2, ok2 := s.acquire(ctx, "root:a")
	if !ok1 || !ok2 {
		t.Fatal("the first two requests of a tenant must not wait")
	}
	if !s.Run(ctx, "root:b", func() {}) {
		t.Fatal("another tenant's request waited for the first tenant's")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if s.Run(short, "root:a", func() { t.Error("ran without a slot") }) {
		t.Fatal("a third request of a tenant with two executing did not wait")
	}
	got := make(chan struct{})
	go s.Run(ctx, "root:a", func() { close(got) })
	select {
	case <-got:
		t.Fatal("a third request ran while two held the slots")
	case <-time.After(50 * time.Millisecond):
	}
	r1()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting request did not get the slot a finished one released")
	}
	r2()
	waitIdle(t, s)
}

// TestYield: a request waiting for a webhook gives its slot back, so the
// webhook's own call into the same tenant runs; the request takes a slot
// again afterwards, and nothing is left held.
func TestYield(t *testing.T) {
	s := New(1)
	inner := make(chan struct{})
	h := WithHolder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Run(r.Context(), "root:a", func() {
			resume := Yield(r.Context())
			// The webhook calls back into root:a: it needs the one slot.
			go func() {
				if !s.Run(context.Background(), "root:a", func() {}) {
					t.Error("the webhook's call found no slot")
				}
				close(inner)
			}()
			select {
			case <-inner:
			case <-time.After(5 * time.Second):
				t.Error("the webhook's call waited for the slot its caller yielded")
			}
			resume()
			// Holding its slot again: another request waits.
			short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if s.Run(short, "root:a", func() {}) {
				t.Error("the slot was free after resume")
			}
		})
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	waitIdle(t, s)
	// Without a holder (a request outside the chain), Yield does nothing.
	Yield(context.Background())()
}

func waitIdle(t *testing.T, s *Slots) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.m)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle tenants left %d entries", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
