// Package inmemory serves the server's loopback clients (its controllers,
// informers and post-start hooks) over in-memory connections instead of
// TLS to its own TCP port: the same handler chain (authentication by the
// loopback token, authorization, priority and fairness, admission), without
// encrypting and decrypting every request, answer and watch event the
// server sends itself, and without a socket anyone else could reach.
package inmemory

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Host is the loopback clients' server URL; it names no network address.
const Host = "http://kcp-loopback"

// Listener hands out in-memory connections to the server.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// New returns a listener that nothing serves yet.
func New() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next connection a client dials.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; dials fail from then on.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the listener's (symbolic) address.
func (l *Listener) Addr() net.Addr { return addr{} }

var errClosed = errors.New("the server's in-memory loopback is closed")

// DialContext connects a client to the server; the address is ignored.
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- conn{server}:
		return conn{client}, nil
	case <-l.done:
	case <-ctx.Done():
	}
	server.Close()
	client.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errClosed
}

// Use points cfg (in place: copies taken from it so far keep their
// transport) at the listener: plain HTTP on in-memory connections, no TLS,
// no compression (nothing crosses a network). The bearer token stays, so
// requests authenticate as before.
func (l *Listener) Use(cfg *rest.Config) {
	if cfg == nil {
		return
	}
	cfg.Host = Host
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Dial = l.DialContext
	cfg.DisableCompression = true
}

// Serve serves handler on the listener until Close; it returns at once.
// Requests in flight when the listener closes are cut off.
func (l *Listener) Serve(handler http.Handler) (stop func()) {
	srv := &http.Server{
		Handler:           handler,
		MaxHeaderBytes:    1 << 20,
		ReadHeaderTimeout: 32 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "in-memory loopback stopped")
		}
	}()
	return func() {
		l.Close()
		srv.Close()
	}
}

type addr struct{}

func (addr) Network() string { return "memory" }
func (addr) String() string  { return "kcp-loopback" }

// conn is one end of a pipe that reports loopback TCP addresses, as a
// loopback client's connection would: the handler chain (audit's source
// IPs, logs) parses them.
type conn struct{ net.Conn }

var loopbackAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

func (conn) LocalAddr() net.Addr  { return loopbackAddr }
func (conn) RemoteAddr() net.Addr { return loopbackAddr }
