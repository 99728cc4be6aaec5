package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

type exported struct {
	Clusters []struct {
		Path    string           `json:"path"`
		Objects []map[string]any `json:"objects"`
	} `json:"clusters"`
}

// objectsOf indexes an export by cluster, kind, namespace and name.
func objectsOf(t *testing.T, file string) map[string]map[string]any {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var e exported
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, c := range e.Clusters {
		for _, o := range c.Objects {
			md := o["metadata"].(map[string]any)
			ns, _ := md["namespace"].(string)
			out[c.Path+"|"+o["kind"].(string)+"|"+ns+"/"+md["name"].(string)] = o
		}
	}
	return out
}

// TestExportImportRoundTrip moves a workspace tree SQLite -> PostgreSQL ->
// SQLite and compares every object; a second import is a clear conflict.
func TestExportImportRoundTrip(t *testing.T) {
	kcp, _ := framework.Binaries(t)
	dir := t.TempDir()
	a := framework.StartServer(t, "")
	a.CreateWorkspaces("root:move:child")
	for _, c := range []string{"root:move", "root:move:child"} {
		a.Kubectl(c, "create", "namespace", "app")
		a.Kubectl(c, "-n", "app", "create", "configmap", "settings", "--from-literal=color=blue", "--from-literal=cluster="+c)
		a.Kubectl(c, "-n", "app", "create", "secret", "generic", "token", "--from-literal=v=s3cret")
		a.Kubectl(c, "-n", "app", "create", "role", "reader", "--verb=get", "--resource=configmaps")
		a.Kubectl(c, "-n", "app", "create", "serviceaccount", "robot")
	}
	run := func(s *framework.Server, args ...string) string {
		t.Helper()
		out, err := exec.Command(kcp, append(args, "--kubeconfig", s.Kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kcp %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	fromA := filepath.Join(dir, "a.json")
	out := run(a, "export", "--cluster", "root:move", "--recursive", "-f", fromA)
	if !strings.Contains(out, "exported root:move:child") {
		t.Errorf("export progress: %s", out)
	}

	b := framework.StartServer(t, framework.FreshPostgres(t))
	run(b, "import", "-f", fromA)
	fromB := filepath.Join(dir, "b.json")
	run(b, "export", "--cluster", "root:move", "--recursive", "-f", fromB)

	c := framework.StartServer(t, "")
	run(c, "import", "-f", fromB)
	fromC := filepath.Join(dir, "c.json")
	run(c, "export", "--cluster", "root:move", "--recursive", "-f", fromC)

	want := objectsOf(t, fromA)
	if len(want) < 10 {
		t.Fatalf("export of A has only %d objects", len(want))
	}
	for name, file := range map[string]string{"PostgreSQL": fromB, "SQLite again": fromC} {
		got := objectsOf(t, file)
		for k, o := range want {
			if !reflect.DeepEqual(got[k], o) {
				t.Errorf("%s: %s differs:\n got %v\nwant %v", name, k, got[k], o)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d objects, want %d", name, len(got), len(want))
		}
	}
	if got := c.Kubectl("root:move:child", "-n", "app", "get", "secret", "token", "-o", "jsonpath={.data.v}"); got != "czNjcmV0" {
		t.Errorf("secret after two moves: %q", got)
	}

	// Importing again is a conflict that names the object.
	cmd := exec.Command(kcp, "import", "-f", fromB, "--kubeconfig", c.Kubeconfig)
	o, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(o), "conflict:") || !strings.Contains(string(o), "already exists in root:move") {
		t.Errorf("second import: %v\n%s", err, o)
	}
	// A file that is not an export is refused.
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"kind":"Something"}`), 0o600)
	if o, err := exec.Command(kcp, "import", "-f", bad, "--kubeconfig", c.Kubeconfig).CombinedOutput(); err == nil || !strings.Contains(string(o), "not a kcp export file") {
		t.Errorf("bad file: %v\n%s", err, o)
	}
}
