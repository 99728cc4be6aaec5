package frontproxy

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestLimitInflight holds requests in a handler that waits, and checks
// that the bounds of short and long-running requests are counted apart,
// that one workspace cannot take more than its share, that a refused
// request gets 429 with Retry-After without reaching the handler, and that
// slots come back when requests end.
func TestLimitInflight(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	reached := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached++
		mu.Unlock()
		if r.URL.Path == "/livez" {
			return
		}
		<-release
		w.WriteHeader(http.StatusOK)
	})
	h := Limit(next, Limits{Requests: 4, LongRunning: 2, PerWorkspace: 50})
	srv := httptest.NewServer(h)
	defer srv.Close()

	type result struct{ code int }
	started := make(chan result, 100)
	send := func(path string) {
		go func() {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				started <- result{-1}
				return
			}
			resp.Body.Close()
			started <- result{resp.StatusCode}
		}()
	}
	waitReached := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			r := reached
			mu.Unlock()
			if r >= n {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("only %d requests reached the handler, want %d", reached, n)
	}
	refused := func(path, why string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s (%s): got %d (Retry-After %q), want 429 with Retry-After", path, why, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}

	// Workspace a takes its share (2 of 4 short requests).
	send("/clusters/root:a/api/v1/namespaces/default/configmaps")
	send("/clusters/root:a/api/v1/namespaces/default/configmaps/x")
	waitReached(2)
	refused("/clusters/root:a/api/v1/namespaces", "workspace a over its share")
	// Another workspace still gets in, up to the bound in all.
	send("/clusters/root:b/api/v1/namespaces")
	send("/clusters/root:c/api/v1/namespaces")
	waitReached(4)
	refused("/clusters/root:d/api/v1/namespaces", "the bound in all")
	// Long-running requests have their own bound.
	send("/clusters/root:d/api/v1/namespaces?watch=true")
	send("/clusters/root:e/api/v1/namespaces/default/pods/p/exec?command=sh")
	waitReached(6)
	refused("/clusters/root:f/api/v1/namespaces/default/pods/p/log?follow=true", "the long-running bound")
	// Health is never refused.
	resp, err := http.Get(srv.URL + "/livez")
	if err == nil {
		resp.Body.Close()
	}
	mu.Lock()
	if reached != 7 { // the six held, and /livez
		t.Errorf("%d requests reached the handler; refused ones must not", reached)
	}
	mu.Unlock()

	close(release)
	for i := 0; i < 6; i++ {
		if r := <-started; r.code != http.StatusOK {
			t.Errorf("a held request ended with %d", r.code)
		}
	}
	// Slots came back.
	resp, err = http.Get(srv.URL + "/clusters/root:a/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the held requests ended: %d, want 200", resp.StatusCode)
	}
}
