package podstreams

import (
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/syncer"
)

// TestMetricsFailure: how a physical cluster's refusal reads; a missing
// pod is no failure, a missing API is.
func TestMetricsFailure(t *testing.T) {
	pc2 := target{Key: "k2", Location: "root:compute", Name: "pc2", Namespace: "kcp-x"}
	podNotFound := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"kcp-x/web\" not found","reason":"NotFound","details":{"name":"kcp-x/web","kind":"pods"},"code":404}`
	pathNotFound := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`
	for _, c := range []struct {
		name string
		code int
		body string
		want string
	}{
		{"web", http.StatusNotFound, podNotFound, ""},
		{"other", http.StatusNotFound, podNotFound, "does not serve metrics.k8s.io"},
		{"web", http.StatusNotFound, pathNotFound, "metrics not available: the physical cluster of SyncTarget pc2 in root:compute does not serve metrics.k8s.io"},
		{"", http.StatusNotFound, "404 page not found", "does not serve metrics.k8s.io"},
		{"", http.StatusServiceUnavailable, `{"kind":"Status","message":"the server is currently unable to handle the request","code":503}`, "does not serve metrics.k8s.io now: the server is currently unable to handle the request"},
		{"", http.StatusForbidden, "syncer tunnel: only logs, exec, attach and port-forward of pods the syncer runs pass the tunnel", "does not forward metrics (upgrade the syncer)"},
		{"", http.StatusForbidden, `{"kind":"Status","message":"pods.metrics.k8s.io is forbidden","code":403}`, "get and list on pods.metrics.k8s.io"},
		{"", http.StatusForbidden, "syncer tunnel: only pods of the namespaces this syncer owns pass the tunnel", ""},
		{"", http.StatusBadRequest, `{"kind":"Status","message":"field label not supported: spec.x","code":400}`, "field label not supported: spec.x"},
		{"", http.StatusInternalServerError, "boom", "answered 500: boom"},
	} {
		err := metricsFailure(pc2, c.name, c.code, []byte(c.body))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d %s for %q: %v, want none", c.code, c.body, c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d %s for %q: %v, want %q", c.code, c.body, c.name, err, c.want)
		}
	}
}

// TestWorkspaceMetrics: a downstream pod's metrics in the workspace: the
// user's namespace, the syncer's labels gone, the target's set.
func TestWorkspaceMetrics(t *testing.T) {
	pc1 := target{Key: "k1", Location: "root:compute", Name: "pc1", Namespace: "kcp-x"}
	down := metricsv1beta1.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "kcp-x", UID: "down-uid",
		Labels:      map[string]string{"app": "web", syncer.TargetLabel: "k1", workload.StateLabelPrefix + "k1": "Sync"},
		Annotations: map[string]string{"downstream": "x"}}}
	got := workspaceMetrics(down, "default", pc1)
	if got.Namespace != "default" || got.Name != "web" || got.UID != "" || len(got.Labels) != 2 || got.Labels["app"] != "web" ||
		got.Labels[ProjectedFromLabel] != "k1" || len(got.Annotations) != 1 || got.Annotations[workload.PhysicalClusterAnnotation] != "root:compute/pc1" {
		t.Errorf("workspace metrics: %+v", got.ObjectMeta)
	}
}
