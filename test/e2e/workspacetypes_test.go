package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWorkspaceTypes: a workspace type that binds the platform's API by
// default; who may use it (only creators who may bind its exports), which
// definition of a name counts (the nearest), unknown types, a forged type
// record, and a default binding that cannot be bound.
func TestWorkspaceTypes(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:platform", "root:org")
	ctx := context.Background()
	publishDatabases(t, s, "root:platform", "", "")

	// alice may bind the export, mallory may not; both may create
	// workspaces in root:org.
	grantClusterRole(t, s, "root:platform", "db-binder", `{apiGroups: ["apis.kcp.io"], resources: ["apiexports"], resourceNames: ["databases"], verbs: ["bind"]}`, "alice")
	grantClusterRole(t, s, "root", "org-members", `{apiGroups: ["tenancy.kcp.io"], resources: ["workspaces/content"], resourceNames: ["org"], verbs: ["access"]}`, "alice", "mallory")
	grantClusterRole(t, s, "root:org", "ws-creator", `{apiGroups: ["tenancy.kcp.io"], resources: ["workspaces"], verbs: ["create", "get", "list"]}`, "alice", "mallory")

	// The built-in types are in root; an invalid type is refused.
	framework.MustContain(t, "built-in types", s.Kubectl("root", "get", "workspacetypes"), "organization", "team")
	for _, c := range []struct{ spec, want string }{
		{`defaultAPIBindings: [{path: root:platform, export: databases}, {path: root:other, export: databases}]`, "each export name may appear once"},
		{`defaultAPIBindings: [{path: "root:Platform", export: databases}]`, "spec.defaultAPIBindings[0].path"},
		{`defaultAPIBindings: [{path: root:platform}]`, "export: Required value"},
	} {
		out, err := s.KubectlErr("root:org", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceType\nmetadata: {name: bad}\nspec:\n  "+c.spec+"\n", "apply", "-f", "-")
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("WorkspaceType with %s: want an error with %q, got %v\n%s", c.spec, c.want, err, out)
		}
	}
	applyYAML(t, s, "root:org", `apiVersion: tenancy.kcp.io/v1alpha1
kind: WorkspaceType
metadata: {name: team}
spec:
  description: a team of the org, with the platform's databases
  defaultAPIBindings: [{path: "root:platform", export: databases}]
---
apiVersion: tenancy.kcp.io/v1alpha1
kind: WorkspaceType
metadata: {name: broken}
spec:
  defaultAPIBindings: [{path: "root:platform", export: nothing}]
`)

	create := func(user, parent, name, wsType string, annotations map[string]interface{}, timeout time.Duration) error {
		t.Helper()
		cfg := s.Config(parent)
		if user != "admin" {
			cfg = clusterinformer.ForCluster(framework.UserConfig(t, s, user), logicalcluster.Name(parent))
		}
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if annotations != nil {
			ws := &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace",
				"metadata": map[string]interface{}{"name": name, "annotations": annotations},
				"spec":     map[string]interface{}{"type": wsType},
			}}
			if _, err := d.Resource(tenancy.WorkspacesResource).Create(ctx, ws, metav1.CreateOptions{}); err != nil {
				return err
			}
			return tenancy.CreateWorkspace(ctx, d, name, wsType, true, timeout)
		}
		return tenancy.CreateWorkspace(ctx, d, name, wsType, false, timeout)
	}

	// alice gets a team workspace with databases bound from its first
	// moment: root:org's "team" is nearer than root's built-in one.
	if err := create("alice", "root:org", "team-1", "team", nil, 30*time.Second); err != nil {
		t.Fatalf("alice creating a team workspace: %v", err)
	}
	framework.MustContain(t, "the default binding", s.Kubectl("root:org:team-1", "get", "apibinding", "databases", "-o", "jsonpath={.status.phase} {.spec.reference.export.path}"), "Bound root:platform")
	framework.MustContain(t, "api-resources in a team workspace", s.Kubectl("root:org:team-1", "api-resources", "--api-group=platform.example.com"), "databases")
	applyYAML(t, s, "root:org:team-1", database("db1", 3))
	// The same name used in root means root's built-in type: no bindings.
	if err := create("admin", "root", "plain-team", "team", nil, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if out := s.Kubectl("root:plain-team", "get", "apibindings", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("a workspace of root's built-in type team has bindings: %s", out)
	}

	// mallory may not bind the export, so she may not use the type either;
	// nothing is created.
	err := create("mallory", "root:org", "team-m", "team", nil, 10*time.Second)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"mallory" may not bind APIExport databases of workspace root:platform`) {
		t.Fatalf("mallory creating a team workspace: want 403 naming the export, got %v", err)
	}
	if out, err := s.KubectlErr("root:org", "", "get", "workspace", "team-m"); err == nil {
		t.Fatalf("the refused workspace exists:\n%s", out)
	}
	// A type defined nowhere up the tree is refused, not ignored.
	err = create("alice", "root:org", "team-x", "tema", nil, 10*time.Second)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `no WorkspaceType "tema" in [root:org root]`) {
		t.Fatalf("an unknown type: want 403 naming where it was looked for, got %v", err)
	}
	// A type defined in a sibling is out of reach.
	applyYAML(t, s, "root:platform", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceType\nmetadata: {name: sibling}\n")
	if err := create("admin", "root:org", "team-s", "sibling", nil, 10*time.Second); !apierrors.IsForbidden(err) {
		t.Fatalf("a type of a sibling workspace: want 403, got %v", err)
	}

	// mallory writes the type record herself (a typeless workspace that
	// would bind databases): kcp's record replaces hers and nothing binds.
	forged := `{"path":"root:org","name":"team","bindings":[{"path":"root:platform","export":"databases"}]}`
	if err := create("mallory", "root:org", "forged", "", map[string]interface{}{tenancy.TypeAnnotation: forged}, 30*time.Second); err != nil {
		t.Fatalf("mallory creating a workspace: %v", err)
	}
	if out := s.Kubectl("root:org", "get", "workspace", "forged", "-o", "jsonpath={.metadata.annotations}"); strings.Contains(out, tenancy.TypeAnnotation) {
		t.Fatalf("the forged type record was kept: %s", out)
	}
	if out := s.Kubectl("root:org:forged", "get", "apibindings", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("a forged type record bound %s", out)
	}
	// Nor can the record of an existing workspace be changed.
	before := s.Kubectl("root:org", "get", "workspace", "team-1", "-o", "jsonpath={.metadata.annotations.tenancy\\.kcp\\.io/type}")
	s.Kubectl("root:org", "annotate", "workspace", "team-1", "--overwrite", tenancy.TypeAnnotation+"=x")
	if after := s.Kubectl("root:org", "get", "workspace", "team-1", "-o", "jsonpath={.metadata.annotations.tenancy\\.kcp\\.io/type}"); after != before || !strings.Contains(before, "databases") {
		t.Fatalf("the type record changed from %q to %q", before, after)
	}

	// A default binding that cannot be bound keeps the workspace
	// Initializing and says why; the plugin reports it.
	out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "ws", "create", "stuck", "--type", "broken", "--timeout", "5s", "--server", s.URL()+"/clusters/root:org")
	if err == nil || !strings.Contains(out, "waiting for APIBinding nothing") {
		t.Fatalf("a workspace whose type binds a missing export: want the waiting reason, got %v\n%s", err, out)
	}
	framework.MustContain(t, "the stuck workspace", s.Kubectl("root:org", "get", "workspace", "stuck", "-o", "jsonpath={.status.phase}"), "Initializing")
	// Across a restart (the controller's first list reads the datastore
	// and gives it this workspace whole), it still waits and still goes.
	s.Stop()
	s.Start()
	framework.Eventually(t, 30*time.Second, "the stuck workspace to be looked at again after the restart", func() (bool, string) {
		out := s.Kubectl("root:org", "get", "workspace", "stuck", "-o", "jsonpath={.status.phase} {.status.conditions[0].message}")
		return strings.HasPrefix(out, "Initializing ") && strings.Contains(out, "waiting for APIBinding nothing"), out
	})
	s.Kubectl("root:org", "delete", "workspace", "stuck", "--timeout=60s")

	// Editing the type changes what later workspaces get, not earlier ones.
	s.Kubectl("root:org", "patch", "workspacetype", "team", "--type=merge", "-p", `{"spec":{"defaultAPIBindings":null}}`)
	if err := create("mallory", "root:org", "team-2", "team", nil, 30*time.Second); err != nil {
		t.Fatalf("a team workspace once the type binds nothing: %v", err)
	}
	if out := s.Kubectl("root:org:team-2", "get", "apibindings", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("team-2 has bindings: %s", out)
	}
	framework.MustContain(t, "team-1's databases", s.Kubectl("root:org:team-1", "get", "databases", "-n", "default", "-o", "name"), "db1")
}
