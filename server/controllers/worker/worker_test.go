package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// A key whose processing panics is retried with backoff and the other
// keys go on; the process (this test) survives.
func TestPanicIsRecoveredPerKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := NewQueue[string]("test")
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan struct{})
	go Run(ctx, "test", q, 2, []cache.Controller{}, func(ctx context.Context, key string) (time.Duration, error) {
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		if key == "bad" {
			if n == 3 {
				close(done)
			}
			var m map[string]int
			m["boom"] = 1 // a nil map write, as a buggy handler would
		}
		return 0, nil
	})
	q.Add("bad")
	q.Add("good")
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the panicking key was not retried")
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["good"] != 1 {
		t.Errorf("the good key was processed %d times, want 1", seen["good"])
	}
}
