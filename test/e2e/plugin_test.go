package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWorkspacePlugin drives `kubectl kcp ws` through a user's day.
func TestWorkspacePlugin(t *testing.T) {
	s := framework.StartServer(t, "")
	kc := filepath.Join(t.TempDir(), "config")
	raw, err := os.ReadFile(s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := s.KubectlPlugin(kc, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	expect := func(out, want string) {
		t.Helper()
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// admin.kubeconfig's current context points at root:
	expect(run("kcp", "ws", "current"), `Current workspace is "root".`)
	expect(run("kcp", "ws", "create", "acme", "--type", "organization", "--enter"), `Current workspace is "root:acme".`)
	expect(run("kcp", "ws", "create", "web"), `Workspace "root:acme:web" is ready.`)
	run("kcp", "ws", "create", "db")
	expect(run("kcp", "ws", "use", "web"), `Current workspace is "root:acme:web".`)
	// kubectl itself now talks to root:acme:web.
	run("create", "configmap", "hello", "-n", "default")
	expect(run("get", "configmap", "hello", "-n", "default", "-o", "jsonpath={.metadata.annotations.kcp\\.io/cluster}"), "root:acme:web")
	expect(run("kcp", "ws", "use", ".."), `Current workspace is "root:acme".`)
	expect(run("kcp", "ws", "use", "-"), `Current workspace is "root:acme:web".`)
	expect(run("kcp", "ws", "use", "root"), `Current workspace is "root".`)
	expect(run("ws", "tree"), "root\n└── acme\n    ├── db\n    └── web\n")
	expect(run("get", "workspaces"), "organization")
	// The short form.
	expect(run("ws", "use", "root:acme"), `Current workspace is "root:acme".`)

	// Errors are clear and leave the kubeconfig alone.
	for args, want := range map[string]string{
		"kcp ws use nope":        `workspace "root:acme:nope" does not exist or you may not access it`,
		"kcp ws use root:x:y":    `workspace "root:x:y" does not exist or you may not access it`,
		"kcp ws use Bad":         `is neither an absolute path`,
		"kcp ws create Bad_Name": `invalid workspace name`,
		"kcp ws create web":      `already exists`,
	} {
		out, err := s.KubectlPlugin(kc, strings.Fields(args)...)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("kubectl %s: %v\n%s\nwant %q", args, err, out, want)
		}
	}
	expect(run("kcp", "ws", "current"), `Current workspace is "root:acme".`)
	// Delete waits until the workspace is gone, like kubectl delete.
	expect(run("kcp", "ws", "delete", "db"), `Workspace "root:acme:db" is deleted.`)
	if out := run("ws", "tree"); strings.Contains(out, "db") {
		t.Errorf("ws delete returned before the workspace was gone:\n%s", out)
	}
	// An error is printed once, without the usage text.
	for _, plugin := range [][]string{{"kcp", "ws"}, {"ws"}} {
		out, err := s.KubectlPlugin(kc, append(plugin, "create", "Bad_Name")...)
		if err == nil || strings.Count(out, "invalid workspace name") != 1 || strings.Contains(out, "Usage:") {
			t.Errorf("kubectl %s create Bad_Name: %v\n%s", strings.Join(plugin, " "), err, out)
		}
	}
	// kubectl's connection flags work after the plugin's name: --server
	// (with the kubeconfig's credentials), --kubeconfig, --context.
	expect(run("kcp", "ws", "current", "--server", s.URL()+"/clusters/root:acme:web"), `Current workspace is "root:acme:web".`)
	expect(run("ws", "tree", "--server", s.URL()+"/clusters/root:acme"), "root:acme\n└── web\n")
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	expect(run("ws", "--kubeconfig", other, "use", "root:acme:web"), `Current workspace is "root:acme:web".`)
	expect(run("kcp", "ws", "current", "--kubeconfig", other), `Current workspace is "root:acme:web".`)
	expect(run("kcp", "ws", "current"), `Current workspace is "root:acme".`) // the default kubeconfig is untouched
	out, err := s.KubectlPlugin(kc, "ws", "current", "--context", "nope")
	if err == nil || !strings.Contains(out, `context "nope" does not exist`) {
		t.Errorf("kubectl ws current --context nope: %v\n%s", err, out)
	}
	// kubectl itself refuses flags before a plugin's name; the plugin's
	// help says where they go.
	expect(run("ws", "--help"), "--server")

	// Usage names the commands as users type them.
	expect(run("ws", "use", "--help"), "kubectl ws use")
	expect(run("kcp", "ws", "use", "--help"), "kubectl kcp ws use")
}
