// Package frontproxy is kcp's front door for an installation of several
// shards (kcp front-proxy): it routes /clusters/<path>/... to the shard
// holding that workspace, for every verb, watches and upgraded streams
// (exec, attach, port-forward) included. It is stateless: it learns where
// each workspace lives from one watch of LogicalClusters per shard, so any
// number of replicas can run side by side.
//
// Identity: a client certificate is checked against the installation's CA
// here and passed on to the shard in request headers (X-Remote-User,
// X-Remote-Group), over a connection that presents the proxy's own
// certificate, the only one whose headers a shard believes. Headers of that
// name sent by a client are always removed first. A bearer token is passed
// on unchanged (without the proxy's certificate), and the shard checks it.
package frontproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/routing"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// unknownWait is how long a request for a workspace no shard has reported
// yet waits for it (a workspace created a moment ago); maxWaiting bounds
// how many requests wait at once.
const (
	unknownWait = 3 * time.Second
	maxWaiting  = 256
)

// Proxy routes requests to shards.
type Proxy struct {
	cfg     *shards.Config
	targets map[string]*url.URL
	routes  *routes
	// vouched carries requests whose user the proxy authenticated (a
	// client certificate): it presents the proxy's certificate. plain
	// carries the others (bearer tokens, anonymous) without one.
	vouched, plain http.RoundTripper
	waiting        chan struct{}
}

// Credentials are the files the proxy uses: the CA shared by the shards,
// its client certificate for vouched requests, and an identity that may
// read LogicalClusters across all clusters on every shard (reader).
type Credentials struct {
	CAFile, CertFile, KeyFile string
	Reader                    func(shards.Shard) *rest.Config
}

// New builds the proxy and starts watching where workspaces live.
func New(ctx context.Context, cfg *shards.Config, cred Credentials) (*Proxy, error) {
	caPEM, err := os.ReadFile(cred.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", cred.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(cred.CertFile, cred.KeyFile)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, targets: map[string]*url.URL{}, routes: newRoutes(), waiting: make(chan struct{}, maxWaiting)}
	p.vouched = transports(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	p.plain = transports(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	for _, s := range cfg.Shards {
		u, err := url.Parse(s.URL)
		if err != nil {
			return nil, err
		}
		p.targets[s.Name] = u
		if err := p.routes.watch(ctx, s.Name, cred.Reader(s)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// byUpgrade sends ordinary requests, watches included, to a shard over
// HTTP/2, where thousands of watches share a few connections, and upgraded
// streams (exec, attach, port-forward), which HTTP/2 cannot carry, over
// HTTP/1.1, one connection each.
type byUpgrade struct{ h2, h1 http.RoundTripper }

func (b byUpgrade) RoundTrip(r *http.Request) (*http.Response, error) {
	if httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") {
		return b.h1.RoundTrip(r)
	}
	return b.h2.RoundTrip(r)
}

// transports is the pair of transports towards the shards for one client
// identity (tc's certificate, or none).
func transports(tc *tls.Config) http.RoundTripper {
	return byUpgrade{h2: transport(tc.Clone(), true), h1: transport(tc.Clone(), false)}
}

// transport is an HTTP/2 transport (h2) or an HTTP/1.1 one that keeps many
// connections per shard open (upgraded streams hold one each).
func transport(tc *tls.Config, h2 bool) http.RoundTripper {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   h2,
	}
	if !h2 {
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return t
}

// Ready reports whether the proxy knows every shard's workspaces.
func (p *Proxy) Ready() bool { return p.routes.hasSynced() }

// ServeHTTP routes one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.URL.Path {
	case "/livez":
		_, _ = w.Write([]byte("ok"))
		return
	case "/readyz":
		if !p.Ready() {
			http.Error(w, "the front proxy has not yet learned where every workspace lives", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
		return
	}
	cluster, rest, err := routing.Split(req.URL.EscapedPath())
	if err != nil {
		routing.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	wildcard := ""
	if cluster.IsWildcard() {
		wildcard = wildcardKind(req, rest)
		if wildcard == "" && req.Method != http.MethodGet && req.Method != http.MethodHead {
			routing.WriteStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
				fmt.Sprintf("%s is not allowed across all logical clusters (/clusters/*): only get, list and watch are", req.Method))
			return
		}
	}
	req.Header.Del(shards.ViewPartHeader)
	if c, consumer, apiPath, ok := exportViewTarget(req.URL.Path); ok {
		// An export's view: its consumers are on every shard. A list or
		// watch across them fans out to every shard as reads across all
		// workspaces do, each shard serving its own consumers; a request
		// for one consumer goes to that consumer's shard; the rest
		// (discovery, OpenAPI) to the provider's shard.
		cluster = c
		switch {
		case consumer.IsWildcard():
			wildcard = wildcardKind(req, apiPath)
			if wildcard != "" {
				req.Header.Set(shards.ViewPartHeader, "true")
			}
		case consumer != "":
			cluster = consumer
		}
	} else if c, ok := viewWorkspace(req.URL.Path); ok {
		// A syncer's view: served by the shard of its location workspace
		// (and it sees that shard's workspaces only).
		cluster = c
	} else if rest == req.URL.EscapedPath() {
		// No /clusters/ prefix: a pod's in-cluster client reaches the
		// workspace its service-account token names (the shard checks
		// the token); anything else is root's.
		if c, ok := routing.TokenCluster(req); ok {
			cluster = c
		}
	}
	shard := shards.RootShard // discovery across all clusters is the root shard's
	if !cluster.IsWildcard() {
		shard = p.shardOf(req.Context(), cluster)
	}
	target := p.targets[shard]
	out := p.plain
	for h := range req.Header {
		if strings.HasPrefix(h, shards.ExtraHeaderPrefix) || h == shards.UserHeader || h == shards.GroupHeader || h == "X-Remote-Uid" {
			req.Header.Del(h)
		}
	}
	if req.TLS != nil && len(req.TLS.VerifiedChains) > 0 && len(req.TLS.PeerCertificates) > 0 {
		// A certificate of the installation's CA: the proxy vouches for
		// its user; a token sent with it is not passed on.
		c := req.TLS.PeerCertificates[0]
		req.Header.Set(shards.UserHeader, c.Subject.CommonName)
		for _, g := range c.Subject.Organization {
			req.Header.Add(shards.GroupHeader, g)
		}
		req.Header.Del("Authorization")
		out = p.vouched
	}
	release, err := bufferBody(req, &buffered)
	if err != nil {
		routing.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "reading the request body: "+err.Error())
		return
	}
	defer release()
	switch wildcard {
	case "list":
		p.serveWildcardList(w, req, out)
		return
	case "watch":
		p.serveWildcardWatch(w, req, out)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			pr.Out.Host = target.Host
		},
		Transport:     out,
		FlushInterval: -1,
		ErrorLog:      nil,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			klog.V(2).InfoS("shard unreachable", "shard", shard, "cluster", cluster, "err", err)
			w.Header().Set("Retry-After", "5")
			routing.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("the shard that holds workspace %s (%s) cannot be reached; try again shortly", cluster, shard))
		},
	}
	rp.ServeHTTP(w, req)
}

// maxBuffered is the largest request body the proxy reads whole before
// passing the request on (the API server takes at most 3 MiB).
const maxBuffered = 8 << 20

// maxBufferedTotal bounds the bodies held at once, whoever sends them: many
// concurrent large bodies cannot make the proxy hold more than this; the
// requests beyond it are streamed as before.
const maxBufferedTotal = 256 << 20

// buffered counts the bytes of request bodies the proxy holds.
var buffered atomic.Int64

// bufferBody reads a request's body before it is passed on. A shard may
// answer before it reads the body (403 of a frozen workspace, 503 of a
// moved one); an HTTP/2 client that gets an error status stops sending the
// body, and the reverse proxy, which waits for its copy of the body to end
// before it ends the response, would then wait forever (a hung write, seen
// during moves). A body read whole cannot be stopped half way. Bodies
// larger than maxBuffered, and any body while maxBufferedTotal is held,
// are streamed as before; upgraded streams have none. release gives the
// bytes back once the request is done.
func bufferBody(req *http.Request, held *atomic.Int64) (release func(), err error) {
	release = func() {}
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 || req.ContentLength > maxBuffered {
		return release, nil
	}
	// Reserve what the body may take (its length, or the most a body of
	// unknown length is read to) before reading it.
	reserve := req.ContentLength
	if reserve < 0 {
		reserve = maxBuffered + 1
	}
	if held.Add(reserve) > maxBufferedTotal {
		held.Add(-reserve)
		return release, nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, maxBuffered+1))
	if err != nil {
		held.Add(-reserve)
		return release, err
	}
	if len(buf) > maxBuffered {
		held.Add(-reserve)
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}
		return release, nil
	}
	held.Add(int64(len(buf)) - reserve)
	n := int64(len(buf))
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(buf))
	req.ContentLength = n
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	return func() { held.Add(-n) }, nil
}

// exportViewTarget splits an export's view path
// (/services/apiexport/<provider>/<export>/clusters/<consumer>/<api path>)
// into the provider, the consumer ("*" all; "" when the path names none)
// and the API path.
func exportViewTarget(path string) (provider, consumer logicalcluster.Name, apiPath string, ok bool) {
	rest, found := strings.CutPrefix(path, "/services/apiexport/")
	if !found {
		return "", "", "", false
	}
	ws, rest, _ := strings.Cut(rest, "/")
	provider, err := logicalcluster.Parse(ws)
	if err != nil || provider.IsWildcard() {
		return "", "", "", false
	}
	_, rest, _ = strings.Cut(rest, "/") // the export's name
	inner, found := strings.CutPrefix(rest, "clusters/")
	if !found {
		return provider, "", "", true
	}
	c, apiPath, _ := strings.Cut(inner, "/")
	if consumer, err = logicalcluster.Parse(c); err != nil {
		return provider, "", "", true
	}
	return provider, consumer, "/" + apiPath, true
}

// viewPrefixes start the paths of the views a shard serves for one
// workspace (server/syncerview, server/exportview).
var viewPrefixes = []string{"/services/syncer/", "/services/apiexport/"}

// viewWorkspace is the workspace a view path names (its location or
// provider workspace).
func viewWorkspace(path string) (logicalcluster.Name, bool) {
	for _, p := range viewPrefixes {
		if rest, ok := strings.CutPrefix(path, p); ok {
			ws, _, _ := strings.Cut(rest, "/")
			c, err := logicalcluster.Parse(ws)
			if err != nil || c.IsWildcard() {
				return "", false
			}
			return c, true
		}
	}
	return "", false
}

// shardOf is the shard holding c. A cluster not seen yet is waited for a
// moment (bounded: at most maxWaiting requests wait at once).
func (p *Proxy) shardOf(ctx context.Context, c logicalcluster.Name) string {
	if c == logicalcluster.Root {
		return shards.RootShard
	}
	if s, ok, _ := p.routes.get(c); ok {
		return s
	}
	select {
	case p.waiting <- struct{}{}:
		defer func() { <-p.waiting }()
		return p.routes.lookup(ctx, c, unknownWait)
	default:
		return p.routes.lookup(ctx, c, 0)
	}
}
