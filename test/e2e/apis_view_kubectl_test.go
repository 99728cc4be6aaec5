package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestKubectlThroughTheExportView: a provider's operator uses kubectl
// through its APIExport's view as against a cluster. Discovery lists the
// export's resources and the claimed ones, nothing else; kubectl apply
// (create, then a change) and kubectl explain work with the OpenAPI v3 the
// view serves per consumer; the OpenAPI index lists only the view's group
// versions, at URLs through the view. Rows that try to get more: another
// group's OpenAPI, a consumer that did not bind, OpenAPI across all
// consumers.
func TestKubectlThroughTheExportView(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:platform", "root:team-a", "root:outsider")
	publishDatabases(t, s, "root:platform", "", "  permissionClaims:\n  - {resource: configmaps, verbs: [get, list]}\n")
	s.Kubectl("root:platform", "create", "clusterrole", "db-operator", "--verb=content", "--resource=apiexports.apis.kcp.io", "--resource-name=databases")
	s.Kubectl("root:platform", "create", "clusterrolebinding", "db-operator", "--clusterrole=db-operator", "--user=db-operator")
	framework.Eventually(t, 20*time.Second, "the export's identity", func() (bool, string) {
		out, _ := s.KubectlErr("root:platform", "", "get", "apiexport", "databases", "-o", "jsonpath={.status.identityHash}")
		return len(out) > 10, out
	})
	if out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "bind", "export", "root:platform:databases", "--server", s.URL()+"/clusters/root:team-a",
		"--accept", "configmaps=get,list"); err != nil {
		t.Fatalf("binding: %v\n%s", err, out)
	}
	s.Kubectl("root:team-a", "create", "configmap", "settings", "--from-literal=a=b")

	view := s.URL() + "/services/apiexport/root:platform/databases/clusters/"
	kubeconfig := framework.UserKubeconfig(t, s, s.URL(), "db-operator")
	kubectl := func(cluster, stdin string, args ...string) (string, error) {
		_, bin := framework.Binaries(t)
		cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig, "--server", view + cluster, "--request-timeout=30s"}, args...)...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// Discovery: the export's resource and the claimed one.
	for _, cluster := range []string{"root:team-a", "*"} {
		out, err := kubectl(cluster, "", "api-resources", "--no-headers", "-o", "name")
		if err != nil {
			t.Fatalf("api-resources through the view (%s): %v\n%s", cluster, err, out)
		}
		if got := strings.Join(strings.Fields(out), " "); got != "configmaps databases.platform.example.com" {
			t.Errorf("api-resources through the view (%s): %q, want the export's databases and the claimed configmaps only", cluster, got)
		}
	}

	// apply (create, then a change) and explain, as against a cluster.
	out, err := kubectl("root:team-a", database("db1", 1), "apply", "-f", "-")
	if err != nil || !strings.Contains(out, "database.platform.example.com/db1 created") {
		t.Fatalf("kubectl apply through the view: %v\n%s", err, out)
	}
	out, err = kubectl("root:team-a", database("db1", 2), "apply", "-f", "-")
	if err != nil || !strings.Contains(out, "database.platform.example.com/db1 configured") {
		t.Fatalf("kubectl apply of a change through the view: %v\n%s", err, out)
	}
	if got := s.Kubectl("root:team-a", "get", "database", "db1", "-o", "jsonpath={.spec.size}"); got != "2" {
		t.Errorf("the consumer's database after apply through the view: size %q", got)
	}
	out, err = kubectl("root:team-a", "", "explain", "databases.spec.size")
	if err != nil || !strings.Contains(out, "size in GiB") {
		t.Errorf("kubectl explain through the view: %v\n%s", err, out)
	}
	out, err = kubectl("*", "", "get", "databases", "-A", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "database.platform.example.com/db1" {
		t.Errorf("kubectl get databases -A across consumers: %v\n%s", err, out)
	}

	// The OpenAPI index: the view's group versions, through the view.
	index, err := kubectl("root:team-a", "", "get", "--raw", "/openapi/v3")
	if err != nil {
		t.Fatalf("the OpenAPI index through the view: %v\n%s", err, index)
	}
	for _, want := range []string{`"apis/platform.example.com/v1"`, `"api/v1"`, `/services/apiexport/root:platform/databases/clusters/root:team-a/openapi/v3/apis/platform.example.com/v1`} {
		if !strings.Contains(index, want) {
			t.Errorf("the OpenAPI index through the view lacks %s:\n%s", want, index)
		}
	}
	if strings.Contains(index, "apis/apps/v1") || strings.Contains(index, "\"/clusters/") {
		t.Errorf("the OpenAPI index through the view lists more than the view serves, or URLs outside it:\n%s", index)
	}
	for _, c := range []struct{ cluster, path, why string }{
		{"root:team-a", "/openapi/v3/apis/apps/v1", "a group the view does not serve"},
		{"root:outsider", "/openapi/v3", "a workspace that did not bind the export"},
		{"root:outsider", "/openapi/v3/apis/platform.example.com/v1", "a workspace that did not bind the export"},
		{"*", "/openapi/v3", "across all consumers"},
		{"root:team-a", "/apis/apps/v1", "discovery of a group the view does not serve"},
	} {
		if out, err := kubectl(c.cluster, "", "get", "--raw", c.path); err == nil || !strings.Contains(out, "NotFound") && !strings.Contains(out, "not found") {
			t.Errorf("%s (%s %s): want 404, got %v\n%s", c.why, c.cluster, c.path, err, out)
		}
	}
}
