package embeddedkine

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
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

// TestSerialWriterBackground checks the order a restore relies on: a
// background write waits while other writes wait, yet one runs at least
// after every backgroundShare others when they never stop coming.
func TestSerialWriterBackground(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newSerialWriter(ctx)

	// Hold the writer busy, queue one background write, then many others.
	hold, holding := make(chan struct{}), make(chan struct{})
	go w.run(func() { close(holding); <-hold })
	<-holding
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.runBackground(func() { mu.Lock(); order = append(order, "bg"); mu.Unlock() })
	}()
	const others = 3 * backgroundShare
	queued := make(chan struct{}, others)
	for range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			queued <- struct{}{}
			w.run(func() { mu.Lock(); order = append(order, "fg"); mu.Unlock() })
		}()
	}
	for range others {
		<-queued
	}
	// Let every sender reach the writer's channels before it goes on.
	for range 100 {
		runtime.Gosched()
	}
	time.Sleep(20 * time.Millisecond)
	close(hold)
	wg.Wait()

	at := slices.Index(order, "bg")
	if at < 0 || len(order) != others+1 {
		t.Fatalf("order %v: want %d writes, the background one among them", order, others+1)
	}
	if at == 0 {
		t.Errorf("the background write ran first, ahead of %d waiting writes: %v", others, order)
	}
	if at > backgroundShare {
		t.Errorf("the background write ran after %d others, want at most %d: %v", at, backgroundShare, order)
	}
}
