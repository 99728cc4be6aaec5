package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestBindCLI (issue 50 item 5): kubectl kcp bind export leaves nothing
// half made when it fails, exits non-zero on a mistyped command, verb or
// claim, and accepts claims an export added after the workspace bound it.
func TestBindCLI(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:platform", "root:other", "root:team")
	publishDatabases(t, s, "root:platform", "", "")
	publishDatabases(t, s, "root:other", "", "")
	bind := func(args ...string) (string, error) {
		return s.KubectlPlugin(s.Kubeconfig, append([]string{"kcp", "bind"}, append(args, "--server", s.URL()+"/clusters/root:team")...)...)
	}
	none := func(after string) {
		t.Helper()
		framework.Eventually(t, 20*time.Second, "no apibinding left after "+after, func() (bool, string) {
			out := s.Kubectl("root:team", "get", "apibindings", "-o", "name")
			return strings.TrimSpace(out) == "", out
		})
	}
	for _, c := range []struct {
		what string
		args []string
		want string
	}{
		{"bind without export", []string{"root:platform:databases"}, "kubectl kcp bind export root:platform:databases"},
		{"a missing export", []string{"export", "root:platform:nosuch", "--timeout=5s"}, "apibinding nosuch was deleted again"},
		{"a forgotten export name", []string{"export", "root:platform", "--timeout=5s"}, "was deleted again"},
		{"a mistyped verb", []string{"export", "root:platform:databases", "--accept", "secrets=get,lst"}, `"lst" is not a verb a claim can name`},
		{"a claim the export does not make", []string{"export", "root:platform:databases", "--accept", "configmaps=get,list"}, "the export makes no such permission claim (it claims: none)"},
	} {
		out, err := bind(c.args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: %v, want a failure saying %q\n%s", c.what, err, c.want, out)
		}
		none(c.what)
	}

	// Bound; the provider then claims configmaps; accepting it later
	// updates the binding.
	if out, err := bind("export", "root:platform:databases"); err != nil {
		t.Fatalf("binding: %v\n%s", err, out)
	}
	s.Kubectl("root:platform", "patch", "apiexport", "databases", "--type=merge", "-p", `{"spec":{"permissionClaims":[{"resource":"configmaps","verbs":["get","list"]}]}}`)
	framework.Eventually(t, 20*time.Second, "the new claim in the binding's status", func() (bool, string) {
		out := s.Kubectl("root:team", "get", "apibinding", "databases", "-o", "jsonpath={.status.exportPermissionClaims}")
		return strings.Contains(out, "configmaps"), out
	})
	if out, err := bind("export", "root:platform:databases", "--accept", "configmaps=watch"); err == nil || !strings.Contains(out, "it claims: configmaps=get,list") {
		t.Errorf("accepting other verbs than claimed: %v\n%s", err, out)
	}
	out, err := bind("export", "root:platform:databases", "--accept", "configmaps=get,list")
	if err != nil || !strings.Contains(out, "accepted permission claim configmaps (get,list)") {
		t.Errorf("accepting a claim added later: %v\n%s", err, out)
	}
	framework.MustContain(t, "the binding's accepted claims", s.Kubectl("root:team", "get", "apibinding", "databases", "-o", "jsonpath={.spec.permissionClaims}"), `"state":"Accepted"`, "configmaps")
	// Another export under a name already taken: refused, nothing changed.
	if out, err := bind("export", "root:other:databases"); err == nil || !strings.Contains(out, "already has an APIBinding databases, to APIExport databases of root:platform") {
		t.Errorf("a second binding under a taken name: %v\n%s", err, out)
	}
	framework.MustContain(t, "the first binding", s.Kubectl("root:team", "get", "apibinding", "databases", "-o", "jsonpath={.spec.reference.export.path}"), "root:platform")
}
