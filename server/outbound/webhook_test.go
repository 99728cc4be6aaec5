package outbound

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// pipeServices answers every dial with one end of a pipe and records what
// was asked for.
type pipeServices struct{ asked []string }

func (p *pipeServices) DialService(_ context.Context, cluster logicalcluster.Name, namespace, name string, port int32) (net.Conn, error) {
	p.asked = append(p.asked, string(cluster)+"|"+namespace+"/"+name+":"+strconv.Itoa(int(port)))
	a, b := net.Pipe()
	b.Close()
	return a, nil
}

func (p *pipeServices) ServicePlaced(context.Context, logicalcluster.Name, string) (bool, error) {
	return true, nil
}

// TestServiceReferences: a service reference of a cluster's webhook is a
// dial of that cluster's Service, and nothing else; without one cluster
// (requests across clusters) it is refused.
func TestServiceReferences(t *testing.T) {
	services := &pipeServices{}
	p := &Policy{Services: services}
	r := p.AuthResolverWrapperFor("root:team-a")(nil)
	cfg, err := r.ClientConfigForService("hook", "default", 443)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Dial(context.Background(), "tcp", "hook.default.svc:443"); err != nil {
		t.Errorf("dialing the Service's name: %v", err)
	}
	for _, addr := range []string{"10.0.0.1:443", "hook.default.svc:8443", "hook.other.svc:443", "kubernetes.default.svc:443"} {
		if _, err := cfg.Dial(context.Background(), "tcp", addr); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("dial of %s: %v, want a refusal", addr, err)
		}
	}
	if strings.Join(services.asked, ",") != "root:team-a|default/hook:443" {
		t.Errorf("dials asked for: %v", services.asked)
	}
	for _, cluster := range []logicalcluster.Name{"", logicalcluster.Wildcard} {
		if _, err := p.AuthResolverWrapperFor(cluster)(nil).ClientConfigForService("hook", "default", 443); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("cluster %q: %v, want a refusal", cluster, err)
		}
	}
	if _, err := (&Policy{}).AuthResolverWrapperFor("root:team-a")(nil).ClientConfigForService("hook", "default", 443); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("without a service dialer: %v, want a refusal", err)
	}
}
