package keys

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestResourcePrefix(t *testing.T) {
	cases := map[schema.GroupResource]string{
		{Resource: "configmaps"}:                                               "/core/configmaps",
		{Group: "rbac.authorization.k8s.io", Resource: "roles"}:                "/rbac.authorization.k8s.io/roles",
		{Group: "events.k8s.io", Resource: "events"}:                           "/core/events",
		{Group: "example.com", Resource: "widgets"}:                            "/example.com/widgets",
		{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: "/apiextensions.k8s.io/customresourcedefinitions",
	}
	for gr, want := range cases {
		if got := ResourcePrefix(gr); got != want {
			t.Errorf("ResourcePrefix(%v) = %q, want %q", gr, got, want)
		}
	}
}

func TestWithCluster(t *testing.T) {
	cases := []struct{ key, want string }{
		{"/core/configmaps/ns/name", "/core/configmaps/root:a/ns/name"},
		{"/core/configmaps/ns", "/core/configmaps/root:a/ns"},
		{"/core/configmaps", "/core/configmaps/root:a"},
		{"/core/namespaces/default", "/core/namespaces/root:a/default"},
	}
	for _, c := range cases {
		got, err := WithCluster("/core/configmaps", c.key, "root:a")
		if c.key == "/core/namespaces/default" {
			got, err = WithCluster("/core/namespaces", c.key, "root:a")
		}
		if err != nil || got != c.want {
			t.Errorf("WithCluster(%q) = %q, %v; want %q", c.key, got, err, c.want)
		}
		if ClusterOf(Prefix+got) != "root:a" {
			t.Errorf("ClusterOf(%q) = %q", Prefix+got, ClusterOf(Prefix+got))
		}
	}
	for _, bad := range []struct {
		key     string
		cluster logicalcluster.Name
	}{
		{"/core/configmapsx/ns/name", "root"},
		{"/core/secrets/ns/name", "root"},
		{"/core/configmaps/ns", "*"},
		{"/core/configmaps/ns", ""},
		{"/core/configmaps/ns", "root/x"},
	} {
		if got, err := WithCluster("/core/configmaps", bad.key, bad.cluster); err == nil {
			t.Errorf("WithCluster(%q, %q) = %q, want an error", bad.key, bad.cluster, got)
		}
	}
}

func TestClusterOf(t *testing.T) {
	cases := map[string]string{
		"/registry/core/configmaps/root:a/ns/n": "root:a",
		"/registry/core/namespaces/root/n":      "root",
		"/registry/core/namespaces/root":        "root",
		"/registry/health":                      "",
		"compact_rev_key":                       "",
		"":                                      "",
	}
	for k, want := range cases {
		if got := ClusterOf(k); got != want {
			t.Errorf("ClusterOf(%q) = %q, want %q", k, got, want)
		}
	}
}
