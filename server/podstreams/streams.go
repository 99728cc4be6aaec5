// Package podstreams serves the pods/log, pods/exec, pods/attach and
// pods/portforward subresources in workspaces: kcp looks the Pod up in the
// workspace (after the workspace's RBAC allowed the subresource, like any
// request), finds the SyncTarget that runs it, and forwards the request to
// that physical cluster's API server, at
//
//	/api/v1/namespaces/<downstream namespace>/pods/<name>/<subresource>?<the client's query>
//
// Pull mode: over the tunnel the target's syncer keeps open to kcp
// (/services/syncer-tunnel/<location>/<target>, opened with the verb
// "sync" on the SyncTarget like the syncer view), one yamux stream per
// request, HTTP/1.1 on it so that upgrades (SPDY, websockets) pass. Push
// mode: kcp's own connection to the cluster, with the kubeconfig it runs
// the syncer with. Streams are bounded: a number open per workspace and
// per SyncTarget (429 beyond), and an idle timeout.
package podstreams

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

// Limits bound the streams kcp forwards.
type Limits struct {
	// PerWorkspace and PerTarget cap the streams open at once in one
	// workspace and through one SyncTarget (0: no cap).
	PerWorkspace, PerTarget int
	// Idle ends a stream nothing was read from or written to for this long
	// (0: never).
	Idle time.Duration
}

// DefaultLimits are kcp start's defaults.
var DefaultLimits = Limits{PerWorkspace: 64, PerTarget: 1000, Idle: 4 * time.Hour}

// Streams routes pod streams to physical clusters. One per server.
type Streams struct {
	mu      sync.Mutex
	limits  Limits
	clients *clusterinformer.Clients
	authz   authorizer.Authorizer
	// tunnels are the newest tunnel of each SyncTarget (by key).
	tunnels map[string]*yamux.Session
	// direct are push-mode targets' physical cluster configurations.
	direct map[string]*rest.Config
	// open counts streams per workspace and per target key.
	openWS     map[logicalcluster.Name]int
	openTarget map[string]int
	// stopping is closed when the server begins to shut down: open
	// streams end then (a logs -f would otherwise hold the graceful
	// shutdown for its whole timeout, and the client's stream with it).
	stopping     chan struct{}
	stoppingOnce sync.Once
}

// Shared is the server's Streams: the pods storage (built before the
// server's loopback configuration exists) and the handler chain share it.
var Shared = &Streams{limits: DefaultLimits, tunnels: map[string]*yamux.Session{}, direct: map[string]*rest.Config{},
	openWS: map[logicalcluster.Name]int{}, openTarget: map[string]int{}, stopping: make(chan struct{})}

// Stop ends every open stream and every later one (the server is shutting
// down).
func (s *Streams) Stop() { s.stoppingOnce.Do(func() { close(s.stopping) }) }

// SetUp gives Streams the loopback configuration it reads namespaces with
// and the server's authorizer.
func (s *Streams) SetUp(loopback *rest.Config, authz authorizer.Authorizer) error {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients, s.authz = clients, authz
	return nil
}

// SetLimits sets the bounds of streams.
func (s *Streams) SetLimits(limits Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = limits
}

// AddDirect registers a push-mode target: kcp reaches its physical
// cluster with cfg until remove is called.
func (s *Streams) AddDirect(key string, cfg *rest.Config) (remove func()) {
	c := rest.CopyConfig(cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.direct[key] = c
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.direct[key] == c {
			delete(s.direct, key)
		}
	}
}

// acquire counts a stream against its workspace's and target's caps;
// release gives it back. Beyond a cap the answer is 429 without
// Retry-After: streams stay open for minutes or hours, and client-go
// retries a 429 that has one (ten times, honouring it), which kept the
// user waiting 50 s for the message.
func (s *Streams) acquire(cluster logicalcluster.Name, t target) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.limits.PerWorkspace; l > 0 && s.openWS[cluster] >= l {
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("workspace %s has %d pod streams (logs, exec, attach, port-forward) open, the most kcp allows (kcp start --pod-streams-per-workspace); close one or retry later", cluster, l), 0)
	}
	if l := s.limits.PerTarget; l > 0 && s.openTarget[t.Key] >= l {
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("%s has %d pod streams open, the most kcp allows (kcp start --pod-streams-per-synctarget); retry later", t, l), 0)
	}
	s.openWS[cluster]++
	s.openTarget[t.Key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.openWS[cluster]--; s.openWS[cluster] <= 0 {
				delete(s.openWS, cluster)
			}
			if s.openTarget[t.Key]--; s.openTarget[t.Key] <= 0 {
				delete(s.openTarget, t.Key)
			}
		})
	}, nil
}

// dialer returns how to reach a target's physical cluster API server: the
// base URL, a transport whose connections are the target's, and for push
// mode the transport of upgrades (with kcp's credentials for the cluster).
func (s *Streams) dialer(t target) (string, http.RoundTripper, proxy.UpgradeRequestRoundTripper, error) {
	s.mu.Lock()
	session := s.tunnels[t.Key]
	direct := s.direct[t.Key]
	idle := s.limits.Idle
	s.mu.Unlock()
	switch {
	case direct != nil:
		rt, upgrade, err := syncer.ForwardTransport(direct, idle)
		return direct.Host, rt, upgrade, err
	case session != nil && !session.IsClosed():
		return "http://syncer-tunnel", &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := session.Open()
				if err != nil {
					return nil, fmt.Errorf("the tunnel of %s closed: %v", t, err)
				}
				return syncer.WithIdleTimeout(c, idle), nil
			},
		}, nil, nil
	}
	return "", nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the syncer of %s has no tunnel open to kcp (is it running, and can it reach kcp?)", t))
}

// Connection is how kcp reaches a SyncTarget's physical cluster now: its
// syncer's open tunnel (pull mode) or kcp's own configuration of the
// cluster (push mode); both nil while neither is there. Service dials
// (server/servicedial) share them.
func (s *Streams) Connection(key string) (*yamux.Session, *rest.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	session := s.tunnels[key]
	if session != nil && session.IsClosed() {
		session = nil
	}
	return session, s.direct[key]
}
