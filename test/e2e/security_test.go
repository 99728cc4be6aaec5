package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestCrossClusterAttempts is a table of requests that try to reach another
// logical cluster's data; each must fail and leak nothing.
func TestCrossClusterAttempts(t *testing.T) {
	s := framework.StartServer(t, "")
	ctx := context.Background()
	secret := "s3cr3t-of-team-b"
	s.CreateWorkspaces("root:team-a", "root:team-b")
	b := s.Client("root:team-b")
	if _, err := b.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vault"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CoreV1().Secrets("vault").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "key", Namespace: "vault"},
		StringData: map[string]string{"k": secret}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	admin := framework.UserClient(t, s, "admin-2", "system:masters")
	alice := framework.UserClient(t, s, "alice", "devs")
	u := s.URL()

	cases := []struct {
		name   string
		client *http.Client
		method string
		path   string
		body   string
		codes  []int
	}{
		{"encoded slash in cluster", admin, "GET", "/clusters/root:team-a%2F..%2Froot:team-b/api/v1/namespaces/vault/secrets", "", []int{400}},
		{"encoded slash joining paths", admin, "GET", "/clusters/root%2Fapi/v1/namespaces/vault/secrets", "", []int{400}},
		{"dot-dot after cluster", admin, "GET", "/clusters/root:team-a/../root:team-b/api/v1/namespaces/vault/secrets", "", []int{400, 404}},
		{"encoded dot-dot after cluster", admin, "GET", "/clusters/root:team-a/%2e%2e/root:team-b/api/v1/namespaces/vault/secrets", "", []int{400, 404}},
		{"doubled prefix", admin, "GET", "/clusters/root:team-a/clusters/root:team-b/api/v1/namespaces/vault/secrets", "", []int{404}},
		{"upper case cluster", admin, "GET", "/clusters/ROOT:TEAM-B/api/v1/namespaces/vault/secrets", "", []int{400}},
		{"cluster not under root", admin, "GET", "/clusters/team-b/api/v1/namespaces/vault/secrets", "", []int{400}},
		{"empty segment", admin, "GET", "/clusters/root::team-b/api/v1/namespaces/vault/secrets", "", []int{400}},
		{"empty cluster", admin, "GET", "/clusters//api/v1/namespaces/vault/secrets", "", []int{400}},
		{"slash in name", admin, "GET", "/clusters/root:team-a/api/v1/namespaces/vault/secrets/..%2F..%2F..%2Froot:team-b%2Fvault%2Fkey", "", []int{400, 404}},
		{"wildcard get of one object", admin, "GET", "/clusters/*/api/v1/namespaces/vault/secrets/key", "", []int{400, 403}},
		{"wildcard namespaced list", admin, "GET", "/clusters/*/api/v1/namespaces/vault/secrets", "", []int{400}},
		{"wildcard create", admin, "POST", "/clusters/*/api/v1/namespaces/vault/secrets", `{"metadata":{"name":"x"}}`, []int{405}},
		{"wildcard delete", admin, "DELETE", "/clusters/*/api/v1/namespaces/vault/secrets/key", "", []int{405}},
		{"wildcard list without privilege", alice, "GET", "/clusters/*/api/v1/secrets", "", []int{403}},
		{"wildcard watch without privilege", alice, "GET", "/clusters/*/api/v1/secrets?watch=true", "", []int{403}},
		{"wildcard discovery without privilege", alice, "GET", "/clusters/*/api/v1", "", []int{403}},
		{"unprivileged user in another cluster", alice, "GET", "/clusters/root:team-b/api/v1/namespaces/vault/secrets", "", []int{403}},
		{"unprivileged watch in another cluster", alice, "GET", "/clusters/root:team-b/api/v1/secrets?watch=true", "", []int{403}},
		{"workspace name with a colon", admin, "POST", "/apis/tenancy.kcp.io/v1alpha1/workspaces", `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":"x:team-b"}}`, []int{422}},
		{"workspace name with a slash", admin, "POST", "/apis/tenancy.kcp.io/v1alpha1/workspaces", `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":"x/team-b"}}`, []int{400, 404, 422}},
		{"discovery of another cluster without access", alice, "GET", "/clusters/root:team-b/apis", "", []int{403}},
		{"openapi v2 of another cluster without access", alice, "GET", "/clusters/root:team-b/openapi/v2", "", []int{403}},
		{"openapi v3 of another cluster without access", alice, "GET", "/clusters/root:team-b/openapi/v3", "", []int{403}},
		{"version of a cluster that does not exist", alice, "GET", "/clusters/root:nope/version", "", []int{403}},
		{"list in a sibling sees nothing", admin, "GET", "/clusters/root:team-a/api/v1/namespaces/vault/secrets", "", []int{200}},
		{"get in a prefix-named cluster that does not exist", admin, "GET", "/clusters/root:team/api/v1/namespaces/vault/secrets/key", "", []int{403, 404}},
		{"get in a longer-named cluster that does not exist", admin, "GET", "/clusters/root:team-bb/api/v1/namespaces/vault/secrets/key", "", []int{403, 404}},
		{"get in a child that does not exist", admin, "GET", "/clusters/root:team-b:x/api/v1/namespaces/vault/secrets/key", "", []int{403, 404}},
		{"get in the parent", admin, "GET", "/clusters/root/api/v1/namespaces/vault/secrets/key", "", []int{404}},
		// Quotas and workspace limits (issue 17).
		{"another cluster's quotas without access", alice, "GET", "/clusters/root:team-b/api/v1/namespaces/vault/resourcequotas", "", []int{403}},
		{"wildcard quota list without privilege", alice, "GET", "/clusters/*/api/v1/resourcequotas", "", []int{403}},
		{"quota status written into another cluster", alice, "PUT", "/clusters/root:team-b/api/v1/namespaces/vault/resourcequotas/q/status",
			`{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"q","namespace":"vault"},"status":{"hard":{"count/secrets":"0"}}}`, []int{403}},
		{"a namespace named like a quota key (cluster|namespace)", admin, "POST", "/clusters/root:team-a/api/v1/namespaces",
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"vault|root:team-b"}}`, []int{422}},
		{"raising another workspace's limits on its LogicalCluster", alice, "PATCH", "/clusters/root:team-b/apis/tenancy.kcp.io/v1alpha1/logicalclusters/cluster", `{"spec":{"limits":{"objects":1}}}`, []int{403}},
		// Admission policies, webhooks and API priority and fairness (issue 17).
		{"a webhook configuration written into another cluster", alice, "POST", "/clusters/root:team-b/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
			`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"spy"},"webhooks":[{"name":"spy.example.com","clientConfig":{"url":"https://spy.example.com/"},"rules":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["*"],"resources":["*"]}],"sideEffects":"None","admissionReviewVersions":["v1"]}]}`, []int{403}},
		{"an admission policy written into another cluster", alice, "POST", "/clusters/root:team-b/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
			`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"name":"deny"},"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["*"],"resources":["*"]}]},"validations":[{"expression":"false"}]}}`, []int{403}},
		{"wildcard list of webhook configurations without privilege", alice, "GET", "/clusters/*/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", "", []int{403}},
		{"a webhook aimed at cloud metadata, even by system:masters", admin, "POST", "/clusters/root:team-a/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
			`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingWebhookConfiguration","metadata":{"name":"meta"},"webhooks":[{"name":"meta.example.com","clientConfig":{"url":"https://169.254.169.254/latest/meta-data/"},"rules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}],"sideEffects":"None","admissionReviewVersions":["v1"]}]}`, []int{422}},
		{"root's kcp-tenants FlowSchema read through a tenant", admin, "GET", "/clusters/root:team-a/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/kcp-tenants", "", []int{404}},
		{"root's kcp-tenants priority level changed by a tenant user", alice, "PATCH", "/clusters/root/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/kcp-tenants",
			`{"spec":{"limited":{"nominalConcurrencyShares":1000}}}`, []int{403}},
		{"root's kcp-tenant-lists priority level changed by a tenant user", alice, "PATCH", "/clusters/root/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/kcp-tenant-lists",
			`{"spec":{"limited":{"borrowingLimitPercent":100}}}`, []int{403}},
		// Default namespaces (issue 15): each workspace's own, and kept.
		{"another cluster's kube-system without access", alice, "GET", "/clusters/root:team-b/api/v1/namespaces/kube-system/configmaps", "", []int{403}},
		{"deleting a workspace's kube-system", admin, "DELETE", "/clusters/root:team-a/api/v1/namespaces/kube-system", "", []int{403}},
		{"deleting a workspace's kube-public", admin, "DELETE", "/clusters/root:team-a/api/v1/namespaces/kube-public", "", []int{403}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := framework.Do(t, tc.client, tc.method, u+tc.path, tc.body)
			ok := false
			for _, c := range tc.codes {
				ok = ok || c == code
			}
			if !ok {
				t.Errorf("%s %s: got %d, want one of %v: %s", tc.method, tc.path, code, tc.codes, body)
			}
			if strings.Contains(body, "czNjcjN0") || strings.Contains(body, secret) || strings.Contains(body, `"name": "key"`) {
				t.Errorf("%s %s leaked team-b's secret: %s", tc.method, tc.path, body)
			}
		})
	}

	// A failed discovery request answers its message as plain text (issue
	// 15); it tells a user without access an existing workspace and a
	// missing one alike.
	_, existing := framework.Do(t, alice, "GET", u+"/clusters/root:team-b/apis", "")
	_, missing := framework.Do(t, alice, "GET", u+"/clusters/root:team-x/apis", "")
	if existing == "" || strings.ReplaceAll(existing, "root:team-b", "X") != strings.ReplaceAll(missing, "root:team-x", "X") {
		t.Errorf("discovery errors tell an existing workspace from a missing one:\n%s\n%s", existing, missing)
	}

	// A CRD created with a forged status (Established, a reason of the
	// client's) is stored with kcp's initial conditions instead.
	code, body := framework.Do(t, admin, "POST", u+"/clusters/root:team-a/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
		`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"forged.example.com"},"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"forged","kind":"Forged"},"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object"}}}]},"status":{"conditions":[{"type":"Established","status":"True","reason":"ForgedByClient","message":"x","lastTransitionTime":"2020-01-01T00:00:00Z"}]}}`)
	if code != 201 || strings.Contains(body, "ForgedByClient") || !strings.Contains(body, "Installing") {
		t.Errorf("a CRD created with a forged status: %d %s", code, body)
	}

	// Headers never select a cluster.
	for _, h := range []string{"X-Kubernetes-Cluster", "X-Kcp-Cluster", "Kcp-Cluster"} {
		req, _ := http.NewRequest("GET", u+"/api/v1/namespaces/vault/secrets/key", nil)
		req.Header.Set(h, "root:team-b")
		resp, err := admin.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("header %s selected a cluster: %d %s", h, resp.StatusCode, body)
		}
	}

	// The privileged wildcard list works and names each object's cluster.
	code, body = framework.Do(t, admin, "GET", u+"/clusters/*/api/v1/secrets", "")
	if code != 200 || !strings.Contains(body, `"kcp.io/cluster":"root:team-b"`) {
		t.Errorf("privileged wildcard list: %d %s", code, body)
	}
	// Wildcard reads of discovery work for the privileged.
	if code, body := framework.Do(t, admin, "GET", u+"/clusters/*/api/v1", ""); code != 200 {
		t.Errorf("privileged wildcard discovery: %d %s", code, body)
	}
}

// TestBadDatastore starts kcp on datastores that cannot work (and with
// settings that cannot work); each fails fast with a message naming the
// datastore or setting and the fix.
func TestBadDatastore(t *testing.T) {
	kcp, _ := framework.Binaries(t)
	cases := []struct {
		datastore, want string
		args            []string
	}{
		{"mysql://root@127.0.0.1/kcp", "is not understood", nil},
		{"postgres://kcp:hunter2@127.0.0.1:1/kcp", "unreachable", nil},
		{"postgres://127.0.0.1:5432/", "names no database", nil},
		{"sqlite:///proc/forbidden/kcp.db", "sqlite:///proc/forbidden/kcp.db", nil},
		{framework.PostgresDSN(), "--datastore-max-connections must be 0 (no bound) or at least 4", []string{"--datastore-max-connections=2"}},
		{"", "--object-count-period must be between 0 (no counts) and 2m0s, not 10m0s", []string{"--object-count-period=10m"}},
	}
	for _, tc := range cases {
		t.Run(tc.datastore+strings.Join(tc.args, ","), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"start", "--root-dir", t.TempDir(), "--secure-port", fmt.Sprint(framework.FreePort(t)), "--datastore", tc.datastore}, tc.args...)
			cmd := execCommand(ctx, kcp, args...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("kcp started on %s", tc.datastore)
			}
			if ctx.Err() != nil {
				t.Fatalf("kcp did not fail fast on %s", tc.datastore)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("error for %s does not say %q:\n%s", tc.datastore, tc.want, out)
			}
			if strings.Contains(string(out), "hunter2") {
				t.Errorf("error leaks the password:\n%s", out)
			}
		})
	}
}

// insecureClient trusts the server's CA and presents no client certificate.
func insecureClient(t *testing.T, s *framework.Server) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(s.RootDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}
