package podstreams

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

// TunnelPrefix starts a tunnel path: <TunnelPrefix><location>/<target>.
const TunnelPrefix = syncer.TunnelPrefix

// WithTunnels returns next, with syncer tunnels served first.
func (s *Streams) WithTunnels(next http.Handler, authn authenticator.Request, authz authorizer.Authorizer) http.Handler {
	gate := &viewidentity.Gate{
		Prefix:   TunnelPrefix,
		PathHelp: "a syncer tunnel path is " + TunnelPrefix + "<location workspace>/<sync target>",
		Authn:    authn, Authz: authz,
		Resource: workload.SyncTargetsResource, Verb: workload.VerbSync,
		Denied: func(caller string, location logicalcluster.Name, target string) error {
			return fmt.Errorf("%q may not open the tunnel of SyncTarget %s in %s (needs the verb %q on it there)", caller, target, location, workload.VerbSync)
		},
		Impersonation: "a syncer tunnel is opened with the syncer's own credentials, without impersonation",
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.HasPrefix(req.URL.Path, TunnelPrefix) {
			next.ServeHTTP(w, req)
			return
		}
		// The gate reads views' paths (<prefix><workspace>/<name>/clusters/...).
		probe := req.Clone(req.Context())
		probe.URL.Path = strings.TrimSuffix(req.URL.Path, "/") + "/clusters/"
		if strings.Count(strings.TrimPrefix(req.URL.Path, TunnelPrefix), "/") != 1 {
			viewidentity.Refuse(w, apierrors.NewNotFound(schema.GroupResource{}, req.URL.Path), gate.PathHelp)
			return
		}
		opened, ok := gate.Open(w, probe)
		if !ok {
			return
		}
		if !strings.EqualFold(req.Header.Get("Upgrade"), syncer.TunnelProtocol) || req.Method != http.MethodGet {
			viewidentity.Refuse(w, apierrors.NewBadRequest("a syncer tunnel is a GET with Upgrade: "+syncer.TunnelProtocol), "")
			return
		}
		s.serveTunnel(w, opened.Workspace, opened.Name)
	})
}

// serveTunnel takes the connection over and keeps it as the target's
// newest tunnel; the one before it closes (its streams end).
func (s *Streams) serveTunnel(w http.ResponseWriter, location logicalcluster.Name, name string) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		viewidentity.Refuse(w, apierrors.NewBadRequest("a syncer tunnel needs HTTP/1.1: "+err.Error()), "")
		return
	}
	conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+syncer.TunnelProtocol+"\r\n\r\n"); err != nil {
		conn.Close()
		return
	}
	if buf != nil && buf.Reader.Buffered() > 0 {
		// The syncer sends nothing before kcp opens a stream.
		conn.Close()
		return
	}
	session, err := yamux.Client(conn, syncer.TunnelConfig())
	if err != nil {
		conn.Close()
		return
	}
	key := workload.TargetKey(string(location), name)
	s.mu.Lock()
	old := s.tunnels[key]
	s.tunnels[key] = session
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	klog.InfoS("syncer tunnel open", "location", location, "syncTarget", name)
	go func() {
		<-session.CloseChan()
		s.mu.Lock()
		if s.tunnels[key] == session {
			delete(s.tunnels, key)
		}
		s.mu.Unlock()
		klog.InfoS("syncer tunnel closed", "location", location, "syncTarget", name)
	}()
}
