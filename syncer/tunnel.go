package syncer

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
)

// The tunnel (pull mode): the syncer keeps a connection to kcp open at
// TunnelPrefix<location>/<target>, upgraded to TunnelProtocol; kcp opens a
// yamux stream on it per pod stream (logs, exec, attach, port-forward) or
// pod metrics request of the target's pods and speaks HTTP/1.1 on it; the syncer forwards exactly
// those requests, of pods in the namespaces it owns, to its physical
// cluster with its own credentials, and service dials (connections to
// the endpoints of the Services it synced, servicedial.go), and nothing
// else.
const (
	TunnelPrefix   = "/services/syncer-tunnel/"
	TunnelProtocol = "kcp-syncer-tunnel"
)

// TunnelConfig is the yamux configuration of both ends.
func TunnelConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	c.EnableKeepAlive = true
	c.KeepAliveInterval = 15 * time.Second
	c.ConnectionWriteTimeout = 30 * time.Second
	c.StreamOpenTimeout = 30 * time.Second
	return c
}

// StripCredentials removes whatever could carry a caller's identity to a
// physical cluster: its credentials and impersonation headers.
func StripCredentials(h http.Header) {
	for k := range h {
		c := http.CanonicalHeaderKey(k)
		if c == "Authorization" || c == "Proxy-Authorization" || c == "Cookie" ||
			strings.HasPrefix(c, "Impersonate-") || strings.HasPrefix(c, "X-Remote-") {
			h.Del(k)
		}
	}
}

// ForwardTransport is how requests (and upgrades) reach a physical
// cluster's API server with cfg's credentials; connections idle for idle
// (0: never) are closed.
func ForwardTransport(cfg *rest.Config, idle time.Duration) (http.RoundTripper, proxy.UpgradeRequestRoundTripper, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	base := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return WithIdleTimeout(c, idle), nil
		},
	}
	rt, err := rest.HTTPWrappersForConfig(cfg, base)
	if err != nil {
		return nil, nil, err
	}
	return rt, proxy.NewUpgradeRequestRoundTripper(base, rt), nil
}

// WithIdleTimeout closes c once nothing was read or written for d.
func WithIdleTimeout(c net.Conn, d time.Duration) net.Conn {
	if d <= 0 {
		return c
	}
	ic := &idleConn{Conn: c}
	ic.timer = time.AfterFunc(d, func() { c.Close() })
	ic.d = d
	return ic
}

type idleConn struct {
	net.Conn
	d     time.Duration
	timer *time.Timer
}

func (c *idleConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.timer.Reset(c.d)
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.timer.Reset(c.d)
	return n, err
}

func (c *idleConn) Close() error {
	c.timer.Stop()
	return c.Conn.Close()
}

// TunnelHandler serves what kcp sends through the tunnel: only
//
//	GET       /api/v1/namespaces/<ns>/pods/<name>/log
//	GET, POST /api/v1/namespaces/<ns>/pods/<name>/{exec,attach,portforward}
//	GET       /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods[/<name>]
//
// of a namespace labelled as the target's (TargetLabel = key), forwarded
// to the physical cluster with the syncer's credentials, and service
// dials (servicedial.go) to the endpoints of the Services it synced;
// anything else is refused with 403 before it reaches the cluster.
func TunnelHandler(down *rest.Config, key string) (http.Handler, error) {
	client, err := kubernetes.NewForConfig(down)
	if err != nil {
		return nil, err
	}
	rt, upgrade, err := ForwardTransport(down, 0)
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(down.Host)
	if err != nil {
		return nil, err
	}
	refuse := func(w http.ResponseWriter, code int, msg string) {
		http.Error(w, "syncer tunnel: "+msg, code)
	}
	services := ServiceEndpoints{Client: client, Key: key}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, ServiceDialPrefix) {
			serveServiceDial(w, req, services)
			return
		}
		ns, sub, ok := podStreamPath(req.URL.Path)
		metrics := false
		if !ok {
			ns, ok = podMetricsPath(req.URL.Path)
			metrics = ok
		}
		if !ok || ((sub == "log" || metrics) && req.Method != http.MethodGet) || (req.Method != http.MethodGet && req.Method != http.MethodPost) {
			refuse(w, http.StatusForbidden, "only logs, exec, attach, port-forward and metrics of pods the syncer runs pass the tunnel")
			return
		}
		got, err := client.CoreV1().Namespaces().Get(req.Context(), ns, metav1.GetOptions{})
		if err != nil || got.Labels[TargetLabel] != key {
			if err == nil || apierrors.IsNotFound(err) {
				refuse(w, http.StatusForbidden, "only pods of the namespaces this syncer owns pass the tunnel")
			} else {
				refuse(w, http.StatusBadGateway, err.Error())
			}
			return
		}
		loc := *base
		loc.Path = strings.TrimSuffix(base.Path, "/") + req.URL.Path
		loc.RawQuery = req.URL.RawQuery

		h := proxy.NewUpgradeAwareHandler(&loc, rt, false, false, simpleResponder{})
		h.UpgradeTransport = upgrade
		h.UseLocationHost = true
		h.FlushInterval = -1
		out := req.Clone(req.Context())
		StripCredentials(out.Header)
		if metrics {
			// A list's selectors only (no watch, no other parameter); the
			// proxy takes the query from the request.
			out.URL.RawQuery = metricsQuery(req.URL.Query()).Encode()
		}
		h.ServeHTTP(w, out)
	}), nil
}

type simpleResponder struct{}

func (simpleResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, "syncer tunnel: "+err.Error(), http.StatusBadGateway)
}

// podStreamPath checks a tunnel request's path and returns its namespace
// and subresource.
func podStreamPath(p string) (namespace, sub string, ok bool) {
	parts := strings.Split(p, "/")
	// "", api, v1, namespaces, <ns>, pods, <name>, <sub>
	if len(parts) != 8 || parts[0] != "" || parts[1] != "api" || parts[2] != "v1" || parts[3] != "namespaces" || parts[5] != "pods" {
		return "", "", false
	}
	if len(validation.IsDNS1123Label(parts[4])) > 0 || len(validation.IsDNS1123Subdomain(parts[6])) > 0 {
		return "", "", false
	}
	switch parts[7] {
	case "log", "exec", "attach", "portforward":
		return parts[4], parts[7], true
	}
	return "", "", false
}

// podMetricsPath checks a tunnel request's path of pod metrics
//
//	/apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods[/<name>]
//
// and returns its namespace.
func podMetricsPath(p string) (namespace string, ok bool) {
	parts := strings.Split(p, "/")
	// "", apis, metrics.k8s.io, v1beta1, namespaces, <ns>, pods[, <name>]
	if (len(parts) != 7 && len(parts) != 8) || parts[0] != "" || parts[1] != "apis" || parts[2] != "metrics.k8s.io" ||
		parts[3] != "v1beta1" || parts[4] != "namespaces" || parts[6] != "pods" {
		return "", false
	}
	if len(validation.IsDNS1123Label(parts[5])) > 0 || len(parts) == 8 && len(validation.IsDNS1123Subdomain(parts[7])) > 0 {
		return "", false
	}
	return parts[5], true
}

// metricsQuery keeps a pod metrics request's label and field selectors.
func metricsQuery(in url.Values) url.Values {
	out := url.Values{}
	for _, k := range []string{"labelSelector", "fieldSelector"} {
		if v := in.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return out
}

// RunTunnel keeps the target's tunnel to kcp open until ctx ends,
// reconnecting with backoff (1 s doubling to 30 s).
func RunTunnel(ctx context.Context, up *rest.Config, target string, down *rest.Config) {
	base, location, err := SplitServer(up.Host)
	if err != nil {
		klog.ErrorS(err, "syncer tunnel: the kcp kubeconfig's server")
		return
	}
	key := workload.TargetKey(string(location), target)
	handler, err := TunnelHandler(down, key)
	if err != nil {
		klog.ErrorS(err, "syncer tunnel")
		return
	}
	backoff := time.Second
	for ctx.Err() == nil {
		began := time.Now()
		err := serveTunnel(ctx, up, base+TunnelPrefix+string(location)+"/"+target, handler)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		klog.InfoS("syncer tunnel to kcp ended; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// serveTunnel opens one tunnel and serves it until it or ctx ends.
func serveTunnel(ctx context.Context, up *rest.Config, rawURL string, handler http.Handler) error {
	conn, err := dialTunnel(ctx, up, rawURL)
	if err != nil {
		return err
	}
	session, err := yamux.Server(conn, TunnelConfig())
	if err != nil {
		conn.Close()
		return err
	}
	klog.InfoS("syncer tunnel to kcp open", "url", rawURL)
	var once sync.Once
	stop := func() { once.Do(func() { session.Close() }) }
	go func() {
		select {
		case <-ctx.Done():
		case <-session.CloseChan():
		}
		stop()
	}()
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, ErrorLog: nil}
	err = srv.Serve(session)
	stop()
	// Open streams end with the session.
	return err
}

// dialTunnel connects to kcp and upgrades the connection, authenticated
// with the syncer's kcp credentials.
func dialTunnel(ctx context.Context, up *rest.Config, rawURL string) (net.Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", TunnelProtocol)
	// The credentials client-go would add (bearer token, exec plugins, ...).
	wrappers, err := rest.HTTPWrappersForConfig(up, proxy.MirrorRequest)
	if err != nil {
		return nil, err
	}
	if req, err = proxy.NewUpgradeRequestRoundTripper(nil, wrappers).WrapRequest(req); err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	var conn net.Conn
	if conn, err = d.DialContext(ctx, "tcp", addr); err != nil {
		return nil, err
	}
	if u.Scheme == "https" {
		tlsConfig, err := rest.TLSConfigFor(up)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if tlsConfig == nil {
			tlsConfig = &tls.Config{}
		}
		tlsConfig = tlsConfig.Clone()
		// An upgrade is HTTP/1.1.
		tlsConfig.NextProtos = []string{"http/1.1"}
		if tlsConfig.ServerName == "" {
			tlsConfig.ServerName = u.Hostname()
		}
		tc := tls.Client(conn, tlsConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		conn.Close()
		return nil, fmt.Errorf("kcp answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	conn.SetDeadline(time.Time{})
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn reads what the response reader buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
