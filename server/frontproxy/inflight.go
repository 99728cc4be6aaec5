package frontproxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/routing"
)

// Limits bound what the front proxy holds at once. Each request in flight
// is a goroutine, its buffers and a request to a shard; without a bound a
// client that opens requests faster than shards answer (or keeps
// thousands of watches) grows the proxy until it fails every tenant. The
// shards share themselves between tenants (priority and fairness); these
// limits protect the proxy, and PerWorkspace keeps one workspace (or the
// cross-workspace reads of /clusters/*) from taking every slot.
type Limits struct {
	// Requests is the most short requests (get, list, create, ...) in
	// flight; LongRunning the most watches and streams (exec, attach,
	// port-forward, logs -f). 0: no bound.
	Requests, LongRunning int
	// PerWorkspace is the share of each bound one workspace may hold, in
	// percent (1-100).
	PerWorkspace int
}

// DefaultLimits are kcp front-proxy's defaults.
var DefaultLimits = Limits{Requests: 4000, LongRunning: 20000, PerWorkspace: 25}

// Validate says what is wrong with l.
func (l Limits) Validate() error {
	if l.Requests < 0 || l.LongRunning < 0 {
		return fmt.Errorf("--max-requests-inflight and --max-long-running-inflight must be 0 (no bound) or more")
	}
	if l.PerWorkspace < 1 || l.PerWorkspace > 100 {
		return fmt.Errorf("--max-inflight-per-workspace-percent must be between 1 and 100, not %d", l.PerWorkspace)
	}
	return nil
}

// Limit returns next behind the bounds of l: a request over a bound is
// answered 429 with Retry-After at once and never reaches a shard.
// /livez and /readyz are not counted.
func Limit(next http.Handler, l Limits) http.Handler {
	return &limiter{next: next, short: newPool(l.Requests, l.PerWorkspace), long: newPool(l.LongRunning, l.PerWorkspace)}
}

type limiter struct {
	next        http.Handler
	short, long *pool
}

func (h *limiter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/livez" || req.URL.Path == "/readyz" {
		h.next.ServeHTTP(w, req)
		return
	}
	cluster, rest, err := routing.Split(req.URL.EscapedPath())
	if err != nil {
		h.next.ServeHTTP(w, req) // answered 400 there
		return
	}
	p, kind := h.short, "requests"
	if longRunning(req, rest) {
		p, kind = h.long, "watches and streams"
	}
	if rest == req.URL.EscapedPath() {
		// No /clusters/ prefix: counted where ServeHTTP sends it.
		if c, ok := routing.TokenCluster(req); ok {
			cluster = c
		}
	}
	key := cluster.String()
	release, why := p.acquire(key)
	if why != "" {
		klog.V(2).InfoS("front proxy: request refused, too many in flight", "cluster", key, "kind", kind, "bound", why)
		w.Header().Set("Retry-After", "1")
		routing.WriteStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			fmt.Sprintf("the front proxy has too many %s in flight (%s); try again shortly", kind, why))
		return
	}
	defer release()
	h.next.ServeHTTP(w, req)
}

// longRunning: watches, and the streams of exec, attach, port-forward,
// proxy and logs -f.
func longRunning(req *http.Request, rest string) bool {
	r := req.Clone(req.Context())
	r.URL.Path = rest
	info, err := infoFactory.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return false
	}
	switch {
	case info.Verb == "watch":
		return true
	case info.Subresource == "exec" || info.Subresource == "attach" || info.Subresource == "portforward" || info.Subresource == "proxy":
		return true
	case info.Subresource == "log":
		f := strings.ToLower(req.URL.Query().Get("follow"))
		return f == "true" || f == "1"
	}
	return false
}

// pool counts requests in flight, in all and per workspace.
type pool struct {
	max, perKey int
	mu          sync.Mutex
	total       int
	byKey       map[string]int
}

func newPool(max, percent int) *pool {
	per := max * percent / 100
	if per < 1 {
		per = 1
	}
	return &pool{max: max, perKey: per, byKey: map[string]int{}}
}

// acquire takes a slot for key, or says which bound is reached.
func (p *pool) acquire(key string) (release func(), why string) {
	if p.max == 0 {
		return func() {}, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total >= p.max {
		return nil, fmt.Sprintf("%d in all", p.max)
	}
	if p.byKey[key] >= p.perKey {
		return nil, fmt.Sprintf("%d for workspace %s", p.perKey, key)
	}
	p.total++
	p.byKey[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.total--
			if p.byKey[key]--; p.byKey[key] == 0 {
				delete(p.byKey, key)
			}
		})
	}, ""
}
