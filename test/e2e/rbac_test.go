package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestRBACIsPerCluster grants a user rights in one logical cluster and checks
// that they hold there only, that the bootstrap ClusterRoles of root are
// shared without being copied, and that root's other ClusterRoles are not.
func TestRBACIsPerCluster(t *testing.T) {
	s := framework.StartServer(t, "")
	a, b := "root:rbac-a", "root:rbac-b"
	s.CreateWorkspaces(a, b)
	// alice may enter both workspaces; what she may do inside is up to each.
	access := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: alice-access
rules:
- apiGroups: ["tenancy.kcp.io"]
  resources: ["workspaces/content"]
  resourceNames: ["rbac-a", "rbac-b"]
  verbs: ["access"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: alice-access
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: alice-access
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: alice
`
	if out, err := s.KubectlErr("root", access, "apply", "-f", "-"); err != nil {
		t.Fatalf("granting access: %v\n%s", err, out)
	}
	for _, c := range []string{a, b} {
		s.Kubectl(c, "create", "namespace", "work")
		s.Kubectl(c, "create", "namespace", "other")
		s.Kubectl(c, "-n", "work", "create", "configmap", "cm", "--from-literal=k=v")
		s.Kubectl(c, "-n", "other", "create", "configmap", "cm", "--from-literal=k=v")
		s.Kubectl(c, "-n", "work", "create", "role", "reader", "--verb=get,list", "--resource=configmaps")
	}
	s.Kubectl(a, "-n", "work", "create", "rolebinding", "alice-reads", "--role=reader", "--user=alice")
	s.Kubectl(b, "-n", "work", "create", "rolebinding", "bob-reads", "--role=reader", "--user=bob")
	// A non-bootstrap ClusterRole in root with the same name a tenant binds.
	s.Kubectl("root", "create", "clusterrole", "root-only", "--verb=*", "--resource=*")
	s.Kubectl(a, "create", "clusterrolebinding", "alice-root-only", "--clusterrole=root-only", "--user=alice")

	alice := framework.UserClient(t, s, "alice", "devs")
	get := func(cluster, path string) int {
		code, _ := framework.Do(t, alice, "GET", s.URL()+"/clusters/"+cluster+path, "")
		return code
	}
	checks := []struct {
		cluster, path string
		want          int
	}{
		{a, "/api/v1/namespaces/work/configmaps", http.StatusOK},
		{a, "/api/v1/namespaces/work/configmaps/cm", http.StatusOK},
		{a, "/api/v1/namespaces/other/configmaps", http.StatusForbidden},
		{a, "/api/v1/namespaces/work/secrets", http.StatusForbidden},
		{b, "/api/v1/namespaces/work/configmaps", http.StatusForbidden},
		{"root", "/api/v1/namespaces/work/configmaps", http.StatusForbidden},
		// Discovery is granted to every authenticated user by root's shared bootstrap binding.
		{b, "/api/v1", http.StatusOK},
		{b, "/apis", http.StatusOK},
	}
	for _, c := range checks {
		if got := get(c.cluster, c.path); got != c.want {
			t.Errorf("alice GET %s in %s: %d, want %d", c.path, c.cluster, got, c.want)
		}
	}

	// The bootstrap ClusterRole "view" is shared: a binding in a grants it in a only.
	s.Kubectl(a, "create", "clusterrolebinding", "devs-view", "--clusterrole=view", "--group=devs")
	framework.Eventually(t, 10e9, "view binding to take effect", func() (bool, string) {
		code := get(a, "/api/v1/namespaces/other/configmaps")
		return code == http.StatusOK, "status " + http.StatusText(code)
	})
	if got := get(b, "/api/v1/namespaces/other/configmaps"); got != http.StatusForbidden {
		t.Errorf("view binding in %s granted access in %s: %d", a, b, got)
	}
	if got := get(a, "/api/v1/namespaces/other/secrets"); got != http.StatusForbidden {
		t.Errorf("view grants secrets: %d", got)
	}

	// Aggregated ClusterRoles of root are filled (admin, edit, view).
	framework.Eventually(t, 10e9, "root's view ClusterRole to be aggregated", func() (bool, string) {
		out := s.Kubectl("root", "get", "clusterrole", "view", "-o", "jsonpath={.rules[*].resources}")
		return strings.Contains(out, "configmaps"), out
	})

	// kubectl auth can-i answers per cluster.
	canI := func(cluster string, args ...string) string {
		out, _ := s.KubectlErr(cluster, "", append([]string{"auth", "can-i", "--as=alice", "--as-group=devs"}, args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return strings.Fields(lines[len(lines)-1])[0]
	}
	if got := canI(a, "get", "configmaps", "-n", "work"); got != "yes" {
		t.Errorf("can-i in %s: %q", a, got)
	}
	if got := canI(b, "get", "configmaps", "-n", "work"); got != "no" {
		t.Errorf("can-i in %s: %q", b, got)
	}
	if got := canI(a, "delete", "namespaces"); got != "no" {
		t.Errorf("root's non-bootstrap ClusterRole was shared: can-i delete namespaces in %s = %q", a, got)
	}
}
