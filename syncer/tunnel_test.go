package syncer

import "testing"

// TestTunnelPaths: the tunnel passes pod streams and nothing else.
func TestTunnelPaths(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods/web/log", true},
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods/web/exec", true},
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods/web/attach", true},
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods/web/portforward", true},
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods/web/proxy", false},
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods/web", false},
		{"/api/v1/namespaces/kcp-0123456789abcdef/secrets/x/log", false},
		{"/api/v1/secrets", false},
		{"/apis/apps/v1/namespaces/x/deployments/web/log", false},
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods/web/log/extra", false},
		{"/api/v1/namespaces/../pods/web/log", false},
		{"/api/v1/namespaces/x/pods/../log", false},
		{"//api/v1/namespaces/x/pods/web/log", false},
		{"/api/v1/namespaces/Upper/pods/web/log", false},
	} {
		if _, _, ok := podStreamPath(c.path); ok != c.ok {
			t.Errorf("%s: passes %v, want %v", c.path, ok, c.ok)
		}
	}
}
