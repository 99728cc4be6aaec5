package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

func applyYAML(t *testing.T, s *framework.Server, cluster, yaml string) {
	t.Helper()
	if out, err := s.KubectlErr(cluster, yaml, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply in %s: %v\n%s", cluster, err, out)
	}
}

// grantClusterRole applies, in cluster, a ClusterRole name with one rule
// (a YAML flow mapping) and a ClusterRoleBinding of it to users.
func grantClusterRole(t *testing.T, s *framework.Server, cluster, name, rule string, users ...string) {
	t.Helper()
	yaml := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: " + name + "}\nrules:\n- " + rule +
		"\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: " + name + "}\n" +
		"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: " + name + "}\nsubjects:\n"
	for _, u := range users {
		yaml += "- {apiGroup: rbac.authorization.k8s.io, kind: User, name: " + u + "}\n"
	}
	applyYAML(t, s, cluster, yaml)
}

// TestMissingClusterIsNotCreated: a request to a logical cluster without a
// workspace is refused, returns no data and creates nothing.
func TestMissingClusterIsNotCreated(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		admin := framework.UserClient(t, s, "admin-2", "system:masters")
		for _, m := range []string{"GET", "POST"} {
			code, body := framework.Do(t, admin, m, s.URL()+"/clusters/root:ghost/api/v1/namespaces", `{"metadata":{"name":"x"}}`)
			if code != http.StatusForbidden || !strings.Contains(body, "does not exist") {
				t.Errorf("%s in a missing cluster: %d %s", m, code, body)
			}
		}
		// kubectl says why, also where it starts with discovery (client-go
		// reads discovery errors raw and made them "Forbidden: unknown").
		for _, args := range [][]string{{"api-resources"}, {"get", "configmaps"}, {"api-versions"}} {
			out, err := s.KubectlErr("root:ghost", "", args...)
			if err == nil || !strings.Contains(out, "logical cluster root:ghost does not exist") || strings.Contains(out, "unknown") {
				t.Errorf("kubectl %s in a missing workspace: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		var n int
		if err := openDatastore(t, s).QueryRow(`SELECT COUNT(*) FROM kine WHERE cluster = 'root:ghost'`).Scan(&n); err != nil || n != 0 {
			t.Errorf("rows of root:ghost: %d %v", n, err)
		}
	})
}

// TestTeamWorkspaces: a platform admin creates an org, grants a team lead the
// right to create workspaces in it; the lead's workspace is theirs alone.
func TestTeamWorkspaces(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:acme")
	// lead may create workspaces in root:acme and enter it.
	applyYAML(t, s, "root", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: acme-members}
rules:
- apiGroups: ["tenancy.kcp.io"]
  resources: ["workspaces/content"]
  resourceNames: ["acme"]
  verbs: ["access"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: acme-members}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: acme-members}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: lead}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: other-lead}
`)
	applyYAML(t, s, "root:acme", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: workspace-creator}
rules:
- apiGroups: ["tenancy.kcp.io"]
  resources: ["workspaces"]
  verbs: ["create", "list", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: leads-create-workspaces}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workspace-creator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: lead}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: other-lead}
`)
	lead := framework.UserClient(t, s, "lead")
	other := framework.UserClient(t, s, "other-lead")
	outsider := framework.UserClient(t, s, "outsider")

	for name, c := range map[string]*http.Client{"web": lead, "db": other} {
		// The grants above take effect once the authorizer's cache has
		// them (as on any API server): retry while still forbidden.
		var code int
		var body string
		framework.Eventually(t, 30*time.Second, "lead to create workspace "+name, func() (bool, string) {
			code, body = framework.Do(t, c, "POST", s.URL()+"/clusters/root:acme/apis/tenancy.kcp.io/v1alpha1/workspaces",
				fmt.Sprintf(`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":%q,"annotations":{"tenancy.kcp.io/owner":"{\"username\":\"outsider\"}"}}}`, name))
			return code != http.StatusForbidden, fmt.Sprintf("%d %s", code, body)
		})
		if code != http.StatusCreated {
			t.Fatalf("creating workspace %s: %d %s", name, code, body)
		}
		// The finalizer that holds deletion until the cluster's data is
		// gone is there from the start.
		if !strings.Contains(body, `"finalizers":["tenancy.kcp.io/workspace"]`) {
			t.Errorf("created workspace %s has no finalizer: %s", name, body)
		}
	}
	framework.Eventually(t, 30*time.Second, "workspaces to be ready", func() (bool, string) {
		out := s.Kubectl("root:acme", "get", "workspaces", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}")
		return strings.Contains(out, "web=Ready") && strings.Contains(out, "db=Ready"), out
	})
	out := s.Kubectl("root:acme", "get", "workspace", "web", "-o", "jsonpath={.status.URL}")
	if out != s.URL()+"/clusters/root:acme:web" {
		t.Errorf("status.URL = %q", out)
	}

	// The lead is admin inside root:acme:web, with a default namespace.
	web := s.URL() + "/clusters/root:acme:web"
	if code, body := framework.Do(t, lead, "POST", web+"/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"mine"}}`); code != http.StatusCreated {
		t.Fatalf("lead creating in own workspace: %d %s", code, body)
	}
	if code, body := framework.Do(t, lead, "POST", web+"/api/v1/namespaces", `{"metadata":{"name":"app"}}`); code != http.StatusCreated {
		t.Fatalf("lead creating a namespace: %d %s", code, body)
	}
	// The other lead, the outsider (despite the forged owner annotation) and
	// an unauthenticated client cannot enter it.
	for name, c := range map[string]*http.Client{"other-lead": other, "outsider": outsider, "anonymous": insecureClient(t, s)} {
		code, body := framework.Do(t, c, "GET", web+"/api/v1/namespaces/default/configmaps", "")
		if code != http.StatusForbidden && code != http.StatusUnauthorized {
			t.Errorf("%s in root:acme:web: %d %s", name, code, body)
		}
		if strings.Contains(body, "mine") {
			t.Errorf("%s saw the lead's data: %s", name, body)
		}
		code, _ = framework.Do(t, c, "GET", web+"/api/v1/configmaps?watch=true&timeoutSeconds=1", "")
		if code != http.StatusForbidden && code != http.StatusUnauthorized {
			t.Errorf("%s watching root:acme:web: %d", name, code)
		}
	}
	// The lead's admin rights stop at the workspace: nothing in root, nothing in db.
	if code, _ := framework.Do(t, lead, "GET", s.URL()+"/api/v1/namespaces", ""); code != http.StatusForbidden {
		t.Errorf("lead listing root namespaces: %d", code)
	}
	if code, _ := framework.Do(t, lead, "GET", s.URL()+"/clusters/root:acme:db/api/v1/namespaces", ""); code != http.StatusForbidden {
		t.Errorf("lead entering db: %d", code)
	}
	// Nor can a workspace admin read across clusters.
	if code, _ := framework.Do(t, lead, "GET", s.URL()+"/clusters/*/api/v1/configmaps", ""); code != http.StatusForbidden {
		t.Errorf("lead reading across clusters: %d", code)
	}
	// Invalid workspace names are refused with a clear message.
	if code, body := framework.Do(t, lead, "POST", s.URL()+"/clusters/root:acme/apis/tenancy.kcp.io/v1alpha1/workspaces",
		`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":"Bad.Name"}}`); code != http.StatusUnprocessableEntity || !strings.Contains(body, "DNS-1123 label") {
		t.Errorf("invalid workspace name: %d %s", code, body)
	}
}

// TestWildcardReaderRole: an identity granted /clusters/* in root reads
// across all workspaces; writes stay impossible.
func TestWildcardReaderRole(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:one", "root:two")
	for _, c := range []string{"root:one", "root:two"} {
		s.Kubectl(c, "-n", "default", "create", "configmap", "hello")
	}
	platform := framework.UserClient(t, s, "platform-controller")
	if code, _ := framework.Do(t, platform, "GET", s.URL()+"/clusters/*/api/v1/configmaps", ""); code != http.StatusForbidden {
		t.Fatalf("wildcard before the grant: %d", code)
	}
	applyYAML(t, s, "root", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kcp-wildcard-reader}
rules:
- nonResourceURLs: ["/clusters/*"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: platform-reads-all}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kcp-wildcard-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: platform-controller}
`)
	// RBAC takes effect when the server's RBAC cache has the binding, as on
	// any Kubernetes API server.
	framework.Eventually(t, 10*time.Second, "the wildcard grant to take effect", func() (bool, string) {
		code, body := framework.Do(t, platform, "GET", s.URL()+"/clusters/*/api/v1/configmaps", "")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	code, body := framework.Do(t, platform, "GET", s.URL()+"/clusters/*/api/v1/configmaps", "")
	if code != http.StatusOK || !strings.Contains(body, `"kcp.io/cluster":"root:one"`) || !strings.Contains(body, `"kcp.io/cluster":"root:two"`) {
		t.Fatalf("wildcard list with the grant: %d %s", code, body)
	}
	if code, _ := framework.Do(t, platform, "GET", s.URL()+"/clusters/*/api/v1/configmaps?watch=true&timeoutSeconds=1", ""); code != http.StatusOK {
		t.Errorf("wildcard watch with the grant: %d", code)
	}
	if code, _ := framework.Do(t, platform, "POST", s.URL()+"/clusters/*/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"x"}}`); code != http.StatusMethodNotAllowed {
		t.Errorf("wildcard write: %d", code)
	}
	// The grant does not open any single workspace.
	if code, _ := framework.Do(t, platform, "GET", s.URL()+"/clusters/root:one/api/v1/configmaps", ""); code != http.StatusForbidden {
		t.Errorf("wildcard reader entering root:one: %d", code)
	}
}

// TestDeleteWorkspaceRemovesEverything deletes a workspace with a child
// workspace and content; watchers see the deletions and SQL shows no live
// object of either cluster afterwards.
func TestDeleteWorkspaceRemovesEverything(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		s.CreateWorkspaces("root:doomed:child", "root:keep")
		for _, c := range []string{"root:doomed", "root:doomed:child", "root:keep"} {
			s.Kubectl(c, "create", "namespace", "data")
			for i := 0; i < 3; i++ {
				s.Kubectl(c, "-n", "data", "create", "configmap", fmt.Sprintf("cm-%d", i))
			}
			s.Kubectl(c, "-n", "data", "create", "secret", "generic", "s", "--from-literal=k=v")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		w, err := s.Client("root:doomed").CoreV1().ConfigMaps("data").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		s.Kubectl("root", "delete", "workspace", "doomed", "--wait=true", "--timeout=60s")

		deleted := 0
		for deleted < 3 {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("watch closed after %d deletions", deleted)
				}
				if _, isCM := ev.Object.(*corev1.ConfigMap); isCM && ev.Type == watch.Deleted {
					deleted++
				}
			case <-ctx.Done():
				t.Fatalf("watch saw %d deletions", deleted)
			}
		}
		db := openDatastore(t, s)
		for _, c := range []string{"root:doomed", "root:doomed:child"} {
			var n int
			if err := db.QueryRow(`SELECT COUNT(*) FROM kcp_objects WHERE cluster = '` + c + `'`).Scan(&n); err != nil || n != 0 {
				t.Errorf("live objects left in %s: %d %v", c, n, err)
			}
		}
		var kept int
		if err := db.QueryRow(`SELECT COUNT(*) FROM kcp_objects WHERE cluster = 'root:keep'`).Scan(&kept); err != nil || kept < 5 {
			t.Errorf("objects of root:keep: %d %v", kept, err)
		}
		// The cluster no longer exists; re-creating the workspace starts empty.
		admin := framework.UserClient(t, s, "admin-2", "system:masters")
		if code, _ := framework.Do(t, admin, "GET", s.URL()+"/clusters/root:doomed/api/v1/namespaces/data/configmaps", ""); code != http.StatusForbidden {
			t.Errorf("deleted cluster still answers: %d", code)
		}
		s.CreateWorkspaces("root:doomed")
		if out, err := s.KubectlErr("root:doomed", "", "-n", "data", "get", "configmaps"); err == nil && strings.Contains(out, "cm-0") {
			t.Errorf("re-created workspace has old data: %s", out)
		}
	})
}
