package inmemory

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestInMemoryLoopback: a client configured by Use reaches the handler
// without TLS or a socket, with its bearer token, sees a streamed answer
// piece by piece as the handler flushes (as a watch does), the handler sees
// a loopback remote address, and once stopped, requests fail with an error
// instead of hanging.
func TestInMemoryLoopback(t *testing.T) {
	l := New()
	release := make(chan struct{})
	stop := l.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer loop-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		if r.TLS != nil {
			t.Errorf("request came over TLS")
		}
		switch r.URL.Path {
		case "/addr":
			fmt.Fprint(w, r.RemoteAddr)
		case "/stream":
			fmt.Fprintln(w, "first")
			w.(http.Flusher).Flush()
			<-release
			fmt.Fprintln(w, "second")
		}
	}))
	cfg := &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "loop-token", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("not a CA")}}
	l.Use(cfg)
	if cfg.Host != Host || len(cfg.TLSClientConfig.CAData) != 0 {
		t.Fatalf("Use left host %q, CA %q", cfg.Host, cfg.TLSClientConfig.CAData)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
		return client.Do(req)
	}

	resp, err := get("/addr")
	if err != nil {
		t.Fatal(err)
	}
	body := new(strings.Builder)
	_, _ = bufioCopy(body, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body.String(), "127.0.0.1:") {
		t.Errorf("/addr: %d %q; want 200 and a loopback address", resp.StatusCode, body)
	}

	resp, err = get("/stream")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	if err != nil || first != "first\n" {
		t.Fatalf("first piece of the stream: %q, %v", first, err)
	}
	close(release)
	second, err := r.ReadString('\n')
	if err != nil || second != "second\n" {
		t.Fatalf("second piece of the stream: %q, %v", second, err)
	}
	resp.Body.Close()

	stop()
	client.CloseIdleConnections()
	if _, err := get("/addr"); err == nil || !errors.Is(err, errClosed) && !strings.Contains(err.Error(), "closed") {
		t.Errorf("a request after stop: %v; want the loopback closed", err)
	}
}

func bufioCopy(w *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	return r.WriteTo(w)
}
