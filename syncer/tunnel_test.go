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

// TestTunnelMetricsPaths: the tunnel passes pod metrics of one namespace
// (a list or one pod), not node metrics or anything else of the group.
func TestTunnelMetricsPaths(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/apis/metrics.k8s.io/v1beta1/namespaces/kcp-0123456789abcdef/pods", true},
		{"/apis/metrics.k8s.io/v1beta1/namespaces/kcp-0123456789abcdef/pods/web", true},
		{"/apis/metrics.k8s.io/v1beta1/pods", false},
		{"/apis/metrics.k8s.io/v1beta1/nodes", false},
		{"/apis/metrics.k8s.io/v1beta1/nodes/pc1-node-0", false},
		{"/apis/metrics.k8s.io/v1beta1/namespaces/kcp-0123456789abcdef/pods/web/extra", false},
		{"/apis/metrics.k8s.io/v1beta1/namespaces/kcp-0123456789abcdef/secrets", false},
		{"/apis/metrics.k8s.io/v1/namespaces/kcp-0123456789abcdef/pods", false},
		{"/apis/custom.metrics.k8s.io/v1beta1/namespaces/kcp-0123456789abcdef/pods", false},
		{"/apis/metrics.k8s.io/v1beta1/namespaces/../pods", false},
		{"/apis/metrics.k8s.io/v1beta1/namespaces/x/pods/..", false},
		{"/api/v1/namespaces/kcp-0123456789abcdef/pods", false},
	} {
		if _, ok := podMetricsPath(c.path); ok != c.ok {
			t.Errorf("%s: passes %v, want %v", c.path, ok, c.ok)
		}
	}
	q := metricsQuery(map[string][]string{"labelSelector": {"app=web"}, "watch": {"true"}, "fieldSelector": {"metadata.name=web"}, "limit": {"1"}})
	if q.Encode() != "fieldSelector=metadata.name%3Dweb&labelSelector=app%3Dweb" {
		t.Errorf("query passed on: %s", q.Encode())
	}
}
