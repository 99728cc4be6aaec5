package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestStaticTokensAndRulesReview: a user from --token-auth-file is subject to
// the same per-workspace rules, and SelfSubjectRulesReview answers per
// workspace.
func TestStaticTokensAndRulesReview(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("s3cret-dev-token,dev,1001,devs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := framework.StartServer(t, "", "--token-auth-file", tokens)
	s.CreateWorkspaces("root:tok-a", "root:tok-b")
	applyYAML(t, s, "root", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: dev-access}
rules:
- apiGroups: ["tenancy.kcp.io"]
  resources: ["workspaces/content"]
  resourceNames: ["tok-a", "tok-b"]
  verbs: ["access"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: dev-access}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: dev-access}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: devs}
`)
	s.Kubectl("root:tok-a", "create", "rolebinding", "dev-edit", "-n", "default", "--clusterrole=edit", "--user=dev")

	client := insecureClient(t, s)
	call := func(cluster, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, s.URL()+"/clusters/"+cluster+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret-dev-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = readBody(b, resp)
		return resp.StatusCode, b.String()
	}
	// A grant takes effect once the authorizer's cache has the binding
	// (as on any API server): retry while it is still forbidden.
	framework.Eventually(t, 30*time.Second, "static-token user with edit in tok-a to create", func() (bool, string) {
		code, body := call("root:tok-a", "POST", "/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"by-dev"}}`)
		return code == http.StatusCreated, fmt.Sprintf("%d %s", code, body)
	})
	if code, _ := call("root:tok-b", "POST", "/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"by-dev"}}`); code != http.StatusForbidden {
		t.Errorf("static-token user in tok-b: %d", code)
	}
	review := `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectRulesReview","spec":{"namespace":"default"}}`
	_, inA := call("root:tok-a", "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", review)
	_, inB := call("root:tok-b", "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", review)
	if !strings.Contains(inA, `"configmaps"`) {
		t.Errorf("rules in tok-a lack configmaps: %s", inA)
	}
	if strings.Contains(inB, `"configmaps"`) {
		t.Errorf("rules in tok-b include tok-a's grant: %s", inB)
	}
	if code, _ := call("root:tok-a", "GET", "/api/v1/namespaces", ""); code != http.StatusForbidden {
		t.Errorf("a wrong-scope request: %d", code)
	}
}

var creationTimestamp = regexp.MustCompile(`"creationTimestamp":"[^"]*"`)

// TestWhoAmIAnywhere: kubectl auth whoami (SelfSubjectReview) answers every
// authenticated user, in a workspace they may not enter and in one that
// does not exist alike, so it tells nothing about workspaces.
func TestWhoAmIAnywhere(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:private")
	c := framework.UserClient(t, s, "nobody")
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	answers := map[string]string{}
	for _, cluster := range []string{"root:private", "root:no-such-workspace"} {
		code, out := framework.Do(t, c, "POST", s.URL()+"/clusters/"+cluster+"/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
		if code != http.StatusCreated || !strings.Contains(out, `"username":"nobody"`) {
			t.Errorf("whoami in %s: %d %s", cluster, code, out)
		}
		// The timestamp is the second the answer was made: the two requests
		// may straddle a second, so it is not part of the comparison.
		answers[cluster] = creationTimestamp.ReplaceAllString(strings.ReplaceAll(out, cluster, ""), "")
		// Anything else there stays refused.
		if code, _ := framework.Do(t, c, "GET", s.URL()+"/clusters/"+cluster+"/api/v1/namespaces", ""); code != http.StatusForbidden {
			t.Errorf("list namespaces in %s as nobody: %d, want 403", cluster, code)
		}
	}
	if answers["root:private"] != answers["root:no-such-workspace"] {
		t.Errorf("whoami answers differ between an existing and a missing workspace:\n%s\n%s", answers["root:private"], answers["root:no-such-workspace"])
	}
}
