package embeddedkine

import (
	"context"
	"sync"
	"testing"
)

// TestSerialWriter checks what the SQLite write path relies on: one write
// at a time, every write handed over runs before run returns, a panic
// reaches the caller that caused it (and the writer goes on), and writes
// handed over after the writer stopped still run.
func TestSerialWriter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w := newSerialWriter(ctx)

	var mu sync.Mutex
	inFlight, most, ran := 0, 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				w.run(func() {
					mu.Lock()
					inFlight++
					most = max(most, inFlight)
					mu.Unlock()
					mu.Lock()
					inFlight--
					ran++
					mu.Unlock()
				})
			}
		}()
	}
	wg.Wait()
	if most != 1 || ran != 64*50 {
		t.Fatalf("%d writes ran, at most %d at once; want %d, one at a time", ran, most, 64*50)
	}

	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("the caller got panic %v, want boom", p)
			}
		}()
		w.run(func() { panic("boom") })
		t.Fatal("run returned after its write panicked")
	}()
	after := false
	w.run(func() { after = true })
	if !after {
		t.Fatal("a write after a panic did not run")
	}

	cancel()
	stopped := false
	w.run(func() { stopped = true })
	if !stopped {
		t.Fatal("a write handed over after the writer stopped did not run")
	}
}
