package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
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

func csrPEM(t *testing.T) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "anyone"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// TestTenantAdminCannotEscape is the security table of issue 12: a tenant
// (the creator of root:org-a, an admin inside it, a namespace admin, a
// token-file user named like a service account) tries what an attacker
// would try against the walls of its workspace. Each row names the hole.
func TestTenantAdminCannotEscape(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("fake-bot-token,system:serviceaccount:default:bot,4242,system:serviceaccounts\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.log")
	s := framework.StartServer(t, "", "--token-auth-file", tokens, "--audit-policy-file", policy, "--audit-log-path", auditLog)
	s.CreateWorkspaces("root:org-b")

	// creator may create workspaces in root; the others may enter org-a;
	// csr-user may approve CSRs of example.com/signer, in root only.
	applyYAML(t, s, "root", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ws-creator}
rules:
- {apiGroups: ["tenancy.kcp.io"], resources: ["workspaces"], verbs: ["create", "list"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ws-creator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ws-creator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: creator}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: org-a-members}
rules:
- {apiGroups: ["tenancy.kcp.io"], resources: ["workspaces/content"], resourceNames: ["org-a", "org-t"], verbs: ["access"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: org-a-members}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: org-a-members}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: org-a-admin}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: ns-admin}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: csr-user}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: signer-approver}
rules:
- {apiGroups: ["certificates.k8s.io"], resources: ["signers"], resourceNames: ["example.com/signer"], verbs: ["approve"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: signer-approver}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: signer-approver}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: csr-user}
`)
	creator := framework.UserClient(t, s, "creator")
	orgAdmin := framework.UserClient(t, s, "org-a-admin")
	nsAdmin := framework.UserClient(t, s, "ns-admin")
	csrUser := framework.UserClient(t, s, "csr-user")
	alice := framework.UserClient(t, s, "alice")
	admin := framework.UserClient(t, s, "admin-2", "system:masters")
	anonymous := insecureClient(t, s)
	u := s.URL()
	wsURL := u + "/apis/tenancy.kcp.io/v1alpha1/workspaces"
	for _, name := range []string{"org-a", "org-x", "org-t"} {
		var code int
		var body string
		framework.Eventually(t, 30*time.Second, "creator to create "+name, func() (bool, string) {
			code, body = framework.Do(t, creator, "POST", wsURL, fmt.Sprintf(`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":%q}}`, name))
			return code != http.StatusForbidden, fmt.Sprintf("%d %s", code, body)
		})
		if code != http.StatusCreated {
			t.Fatalf("creating %s: %d %s", name, code, body)
		}
	}
	framework.Eventually(t, 30*time.Second, "workspaces to be ready", func() (bool, string) {
		out := s.Kubectl("root", "get", "workspaces", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}")
		return strings.Contains(out, "org-a=Ready") && strings.Contains(out, "org-x=Ready") && strings.Contains(out, "org-t=Ready"), out
	})
	a := u + "/clusters/root:org-a"
	s.Kubectl("root:org-a", "create", "clusterrolebinding", "org-a-admin", "--clusterrole=cluster-admin", "--user=org-a-admin")
	// org-t is where org-a-admin tries to lock the operators out.
	s.Kubectl("root:org-t", "create", "clusterrolebinding", "org-a-admin", "--clusterrole=cluster-admin", "--user=org-a-admin")
	s.Kubectl("root:org-a", "-n", "default", "create", "rolebinding", "ns-admin", "--clusterrole=admin", "--user=ns-admin")
	s.Kubectl("root:org-a", "-n", "default", "create", "serviceaccount", "bot")
	s.Kubectl("root:org-a", "-n", "default", "create", "rolebinding", "bot-view", "--clusterrole=view", "--serviceaccount=default:bot")
	s.Kubectl("root:org-a", "-n", "default", "create", "configmap", "plans", "--from-literal=k=v")
	applyYAML(t, s, "root:org-a", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: csr-approver}
rules:
- {apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests"], verbs: ["get", "list", "create"]}
- {apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests/approval"], verbs: ["update"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: csr-approver}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: csr-approver}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: csr-user}
`)
	for _, name := range []string{"by-root-grant", "by-org-admin"} {
		csr := fmt.Sprintf(`{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":%q},"spec":{"request":%q,"signerName":"example.com/signer","usages":["client auth"]}}`, name, csrPEM(t))
		if code, body := framework.Do(t, admin, "POST", a+"/apis/certificates.k8s.io/v1/certificatesigningrequests", csr); code != http.StatusCreated {
			t.Fatalf("creating CSR %s: %d %s", name, code, body)
		}
	}
	approval := func(name string) string {
		return fmt.Sprintf(`{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":%q},"status":{"conditions":[{"type":"Approved","status":"True","reason":"Attack","message":"approved"}]}}`, name)
	}
	// Wait until the grants inside org-a are in effect for everyone.
	framework.Eventually(t, 30*time.Second, "grants in org-a", func() (bool, string) {
		c1, _ := framework.Do(t, orgAdmin, "GET", a+"/api/v1/namespaces", "")
		c2, _ := framework.Do(t, nsAdmin, "GET", a+"/api/v1/namespaces/default/configmaps", "")
		c3, _ := framework.Do(t, csrUser, "GET", a+"/apis/certificates.k8s.io/v1/certificatesigningrequests", "")
		c4, _ := framework.Do(t, orgAdmin, "GET", u+"/clusters/root:org-t/api/v1/namespaces", "")
		return c1 == 200 && c2 == 200 && c3 == 200 && c4 == 200, fmt.Sprint(c1, c2, c3, c4)
	})
	botToken := strings.TrimSpace(s.Kubectl("root:org-a", "-n", "default", "create", "token", "bot"))

	lc := a + "/apis/tenancy.kcp.io/v1alpha1/logicalclusters"
	lcT := u + "/clusters/root:org-t/apis/tenancy.kcp.io/v1alpha1/logicalclusters"
	merge := map[string]string{"Content-Type": "application/merge-patch+json"}
	asMasters := map[string]string{"Content-Type": "application/merge-patch+json", "Impersonate-User": "system:apiserver", "Impersonate-Group": "system:masters"}
	cases := []struct {
		item    string
		name    string
		client  *http.Client
		method  string
		url     string
		body    string
		headers map[string]string
		codes   []int
	}{
		{"1", "workspace admin makes itself owner", orgAdmin, "PATCH", lc + "/cluster",
			`{"metadata":{"annotations":{"tenancy.kcp.io/owner":"{\"username\":\"org-a-admin\"}"}}}`, merge, []int{403}},
		{"1", "workspace admin removes the owner", orgAdmin, "PATCH", lc + "/cluster", `{"metadata":{"annotations":null}}`, merge, []int{403}},
		{"1", "workspace admin points the cluster at another Workspace", orgAdmin, "PATCH", lc + "/cluster",
			`{"spec":{"owner":{"cluster":"root","name":"org-b","uid":"x"}}}`, merge, []int{403}},
		{"1", "workspace admin replaces the LogicalCluster", orgAdmin, "PUT", lc + "/cluster",
			`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"LogicalCluster","metadata":{"name":"cluster"}}`, nil, []int{403, 409, 422}},
		{"1", "workspace admin creates a second LogicalCluster", orgAdmin, "POST", lc,
			`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"LogicalCluster","metadata":{"name":"other"}}`, nil, []int{403, 422}},
		{"1", "workspace admin impersonates the server to rewrite the owner", orgAdmin, "PATCH", lc + "/cluster",
			`{"metadata":{"annotations":{"tenancy.kcp.io/owner":"{\"username\":\"org-a-admin\"}"}}}`, asMasters, []int{403}},
		{"6", "workspace admin adds a finalizer to the LogicalCluster", orgAdmin, "PATCH", lc + "/cluster", `{"metadata":{"finalizers":["x/y"]}}`, merge, []int{403}},
		{"6", "workspace admin impersonates system:masters", orgAdmin, "GET", a + "/api/v1/namespaces",
			"", map[string]string{"Impersonate-User": "someone", "Impersonate-Group": "system:masters"}, []int{403}},
		{"7", "approve granted in root only approves in org-a", csrUser, "PUT", a + "/apis/certificates.k8s.io/v1/certificatesigningrequests/by-root-grant/approval",
			approval("by-root-grant"), nil, []int{403}},
		{"7", "namespace admin binds cluster-admin", nsAdmin, "POST", a + "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"escalate"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"ns-admin"}]}`, nil, []int{403}},
		{"7", "namespace admin writes a Role beyond admin", nsAdmin, "POST", a + "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"too-much"},"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`, nil, []int{403}},
		{"9", "token-file user named like the cluster's service account", anonymous, "GET", a + "/api/v1/namespaces/default/configmaps",
			"", map[string]string{"Authorization": "Bearer fake-bot-token"}, []int{403}},
		// Impersonation is authorized by the workspace's own RBAC, and the
		// impersonated service account is then judged as the workspace's
		// (issue 50 item 4): no more than its bindings give it.
		{"9", "workspace admin impersonates a service account without rights", orgAdmin, "GET", a + "/api/v1/namespaces/default/configmaps",
			"", map[string]string{"Impersonate-User": "system:serviceaccount:default:nobody"}, []int{403}},
		{"9", "workspace admin impersonates the bot: judged as the bot", orgAdmin, "GET", a + "/api/v1/namespaces/default/configmaps",
			"", map[string]string{"Impersonate-User": "system:serviceaccount:default:bot"}, []int{200}},
		// Last, and in org-t: without the fix, each locks everyone out.
		{"6", "workspace admin sets the phase to Terminating", orgAdmin, "PATCH", lcT + "/cluster/status", `{"status":{"phase":"Terminating"}}`, merge, []int{403}},
		{"6", "workspace admin deletes the LogicalCluster", orgAdmin, "DELETE", lcT + "/cluster", "", nil, []int{403}},
		{"6", "workspace admin deletes all LogicalClusters", orgAdmin, "DELETE", lcT, "", nil, []int{403}},
	}
	for _, tc := range cases {
		t.Run("item "+tc.item+": "+tc.name, func(t *testing.T) {
			code, body := framework.DoWith(t, tc.client, tc.method, tc.url, tc.body, tc.headers)
			ok := false
			for _, c := range tc.codes {
				ok = ok || c == code
			}
			if !ok {
				t.Errorf("%s %s: got %d, want one of %v: %s", tc.method, tc.url, code, tc.codes, body)
			}
		})
	}

	// What the attacks must not have changed, and what must still work.
	t.Run("item 1/6: the LogicalCluster is as kcp wrote it", func(t *testing.T) {
		out := s.Kubectl("root:org-a", "get", "logicalcluster", "cluster", "-o", "jsonpath={.metadata.annotations.tenancy\\.kcp\\.io/owner} {.status.phase}")
		if !strings.Contains(out, `"username":"creator"`) || !strings.HasSuffix(out, " Ready") {
			t.Errorf("LogicalCluster after the attacks: %s", out)
		}
		if code, body := framework.Do(t, orgAdmin, "DELETE", wsURL+"/org-a", ""); code != http.StatusForbidden {
			t.Errorf("org-a-admin deleting the Workspace org-a in root: %d %s", code, body)
		}
		for _, c := range []string{"root:org-a", "root:org-t"} {
			if code, body := framework.Do(t, admin, "GET", u+"/clusters/"+c+"/api/v1/namespaces", ""); code != http.StatusOK {
				t.Errorf("system:masters locked out of %s: %d %s", c, code, body)
			}
		}
		if code, body := framework.Do(t, orgAdmin, "GET", lc+"/cluster", ""); code != http.StatusOK {
			t.Errorf("workspace admin reading its LogicalCluster: %d %s", code, body)
		}
	})
	t.Run("item 5: the creator cannot strip the Workspace's finalizer", func(t *testing.T) {
		code, body := framework.DoWith(t, creator, "PATCH", wsURL+"/org-x", `{"metadata":{"finalizers":null}}`, merge)
		if code != http.StatusOK || !strings.Contains(body, `"tenancy.kcp.io/workspace"`) {
			t.Errorf("stripping the finalizer: %d %s", code, body)
		}
		if code, body := framework.Do(t, creator, "DELETE", wsURL+"/org-x", ""); code != http.StatusOK {
			t.Fatalf("deleting org-x: %d %s", code, body)
		}
		// The Workspace goes only with its cluster; then the name is free.
		framework.Eventually(t, 60*time.Second, "org-x to be gone", func() (bool, string) {
			code, body := framework.Do(t, admin, "GET", wsURL+"/org-x", "")
			return code == http.StatusNotFound, fmt.Sprint(code, body)
		})
		if code, body := framework.Do(t, admin, "GET", u+"/clusters/root:org-x/api/v1/namespaces", ""); code != http.StatusForbidden {
			t.Errorf("root:org-x after its Workspace is gone: %d %s", code, body)
		}
		s.CreateWorkspaces("root:org-x")
	})
	t.Run("item 7: org-a's RBAC decides admission-time checks", func(t *testing.T) {
		if code, body := framework.Do(t, orgAdmin, "PUT", a+"/apis/certificates.k8s.io/v1/certificatesigningrequests/by-org-admin/approval", approval("by-org-admin")); code != http.StatusOK {
			t.Errorf("cluster-admin of org-a approving a CSR in org-a: %d %s", code, body)
		}
		role := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"reader"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list"]}]}`
		if code, body := framework.Do(t, nsAdmin, "POST", a+"/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role); code != http.StatusCreated {
			t.Errorf("namespace admin (shared admin role) writing a Role admin entitles it to: %d %s", code, body)
		}
		bind := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"viewers"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"someone"}]}`
		if code, body := framework.Do(t, nsAdmin, "POST", a+"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", bind); code != http.StatusCreated {
			t.Errorf("namespace admin binding the shared view role: %d %s", code, body)
		}
	})
	t.Run("item 9: a real service-account token of the cluster still gets in", func(t *testing.T) {
		code, body := framework.DoWith(t, anonymous, "GET", a+"/api/v1/namespaces/default/configmaps", "", map[string]string{"Authorization": "Bearer " + botToken})
		if code != http.StatusOK || !strings.Contains(body, "plans") {
			t.Errorf("the bot's own token in org-a: %d %s", code, body)
		}
	})
	t.Run("item 8: a missing workspace answers like a forbidden one", func(t *testing.T) {
		_, existing := framework.Do(t, alice, "GET", u+"/clusters/root:org-b/api/v1/namespaces/default/configmaps", "")
		_, missing := framework.Do(t, alice, "GET", u+"/clusters/root:org-q/api/v1/namespaces/default/configmaps", "")
		if strings.ReplaceAll(existing, "org-b", "X") != strings.ReplaceAll(missing, "org-q", "X") {
			t.Errorf("403 differs between an existing and a missing workspace:\n%s\n%s", existing, missing)
		}
	})
	t.Run("item 8: the audit log keeps the full request path", func(t *testing.T) {
		path := "/clusters/root:org-a/clusters/root:org-b/api/v1/namespaces?limit=7"
		framework.Do(t, orgAdmin, "GET", u+path, "")
		want := regexp.MustCompile(`"requestURI":"` + regexp.QuoteMeta(path) + `"`)
		framework.Eventually(t, 10*time.Second, "the audit event", func() (bool, string) {
			b, _ := os.ReadFile(auditLog)
			return want.Match(b), "no event with requestURI " + path
		})
	})
}

// TestWorkspaceWithoutFinalizerIsDeletedWithItsCluster: when an operator
// removes a Workspace's finalizer and deletes it (what a tenant can no
// longer do), the cluster does not live on, and the name can be used again.
func TestWorkspaceWithoutFinalizerIsDeletedWithItsCluster(t *testing.T) {
	forEachDialect(t, testWorkspaceWithoutFinalizer)
}

func testWorkspaceWithoutFinalizer(t *testing.T, s *framework.Server) {
	s.CreateWorkspaces("root:gone")
	s.Kubectl("root:gone", "-n", "default", "create", "configmap", "old-data", "--from-literal=k=v")
	admin := framework.UserClient(t, s, "admin-2", "system:masters")
	// Back to back, before the controller puts its finalizer back.
	ws := s.URL() + "/apis/tenancy.kcp.io/v1alpha1/workspaces/gone"
	if code, body := framework.DoWith(t, admin, "PATCH", ws, `{"metadata":{"finalizers":null}}`, map[string]string{"Content-Type": "application/merge-patch+json"}); code != http.StatusOK {
		t.Fatalf("removing the finalizer: %d %s", code, body)
	}
	if code, body := framework.Do(t, admin, "DELETE", ws, ""); code != http.StatusOK {
		t.Fatalf("deleting the Workspace: %d %s", code, body)
	}
	if code, _ := framework.Do(t, admin, "GET", ws, ""); code != http.StatusNotFound {
		t.Logf("the controller put its finalizer back first (GET: %d); the test shows nothing this time", code)
	}
	framework.Eventually(t, 30*time.Second, "root:gone to be unreachable", func() (bool, string) {
		code, body := framework.Do(t, admin, "GET", s.URL()+"/clusters/root:gone/api/v1/namespaces/default/configmaps", "")
		return code == http.StatusForbidden, fmt.Sprint(code, body)
	})
	s.CreateWorkspaces("root:gone")
	if out := s.Kubectl("root:gone", "-n", "default", "get", "configmaps", "-o", "name"); strings.Contains(out, "old-data") {
		t.Errorf("the new root:gone shows the old one's data: %s", out)
	}
}
