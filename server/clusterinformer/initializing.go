package clusterinformer

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// While a watch cache fills at start-up, the API server refuses reads of
// its resource with 429 "storage is (re)initializing" and a Retry-After
// that grows with the time the cache has been filling (upstream's cacher:
// e^(0.06 s^-1 * downtime), at most 30 s). client-go waits that long
// between its retries, and a reflector backs off on top of it when the
// retries run out, so at 100,000 workspaces, with fills of 20-35 s, the
// server's own informers listed seconds after their cache was ready, and
// /readyz (which waits for some of them) with them. The server's loopback
// clients instead ask again every initializingPoll: a refused read is
// cheap, and they read as soon as the cache is filled.
//
// A cache also refuses reads while it lists again after its watch broke
// (a datastore outage): a request waits at most initializingMaxWait, then
// gets the refusal as the API server gave it (client-go retries it after
// its Retry-After), so a controller's worker is not held for an outage's
// length.
const (
	initializingPoll    = 200 * time.Millisecond
	initializingMaxWait = time.Minute
)

var initializingMessage = []byte("storage is (re)initializing")

// waitForCaches is a loopback transport that retries GETs (reads, lists
// and watches) refused because a watch cache is filling, until it answers
// otherwise, the request's context ends or initializingMaxWait has passed.
// Every other answer, and every other method, passes through.
type waitForCaches struct{ next http.RoundTripper }

func (w waitForCaches) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return w.next.RoundTrip(req)
	}
	deadline := time.Now().Add(initializingMaxWait)
	for {
		resp, err := w.next.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			return resp, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if !bytes.Contains(body, initializingMessage) || time.Now().After(deadline) {
			resp.Body = io.NopCloser(bytes.NewReader(body))
			return resp, nil
		}
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-time.After(initializingPoll):
		}
	}
}

// waitingForCaches returns a copy of a loopback config whose GETs wait for
// a filling watch cache (waitForCaches).
func waitingForCaches(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return waitForCaches{rt} })
	return cfg
}
