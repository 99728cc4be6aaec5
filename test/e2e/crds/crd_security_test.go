package crds

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestCRDIsolation tries to reach another cluster's custom resources,
// definitions, discovery and OpenAPI, and the system CRDs, as the admin of
// one workspace.
func TestCRDIsolation(t *testing.T) {
	s := framework.StartServer(t, "")
	const a, b = "root:sec-a", "root:sec-b"
	s.CreateWorkspaces(a, b)
	for c, crd := range map[string]string{a: framework.WidgetsA, b: framework.WidgetsB} {
		if out, err := s.KubectlErr(c, crd, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		s.WaitEstablished(c, "crd/widgets.example.com")
	}
	s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: mine, namespace: default}\nspec: {size: 1}\n", "apply", "-f", "-")
	if out, err := s.KubectlErr(b, "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: secret-widget, namespace: default}\nspec: {color: blue}\n", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// alice enters a, where she is cluster-admin; b is not hers.
	s.GrantAccess("root", "alice", "sec-a")
	s.Kubectl(a, "create", "clusterrolebinding", "alice-admin", "--clusterrole=cluster-admin", "--user=alice")
	alice := framework.UserClient(t, s, "alice")

	// Her own widgets work.
	if code, body := framework.Do(t, alice, "GET", s.URL()+"/clusters/"+a+"/apis/example.com/v1/namespaces/default/widgets/mine", ""); code != http.StatusOK {
		t.Fatalf("alice reading her own widget: %d %s", code, body)
	}
	crdBody := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"evils.example.com"},
"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"evils","singular":"evil","kind":"Evil"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object"}}}]}}`
	for _, tc := range []struct {
		what, method, path, body string
		want                     int
	}{
		{"b's widgets", "GET", "/clusters/" + b + "/apis/example.com/v2/namespaces/default/widgets", "", http.StatusForbidden},
		{"b's widgets with an encoded ':'", "GET", "/clusters/root%3Asec-b/apis/example.com/v2/namespaces/default/widgets", "", http.StatusForbidden},
		{"b's version in a", "GET", "/clusters/" + a + "/apis/example.com/v2/namespaces/default/widgets", "", http.StatusNotFound},
		{"b's object name in a", "GET", "/clusters/" + a + "/apis/example.com/v1/namespaces/default/widgets/secret-widget", "", http.StatusNotFound},
		{"b's group version discovery in a", "GET", "/clusters/" + a + "/apis/example.com/v2", "", http.StatusNotFound},
		{"b's OpenAPI in a", "GET", "/clusters/" + a + "/openapi/v3/apis/example.com/v2", "", http.StatusNotFound},
		{"b's CRD", "GET", "/clusters/" + b + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "", http.StatusForbidden},
		{"widgets of all clusters", "GET", "/clusters/*/apis/example.com/v1/widgets", "", http.StatusForbidden},
		{"a watch of all clusters", "GET", "/clusters/*/apis/example.com/v2/widgets?watch=true", "", http.StatusForbidden},
		{"discovery of all clusters", "GET", "/clusters/*/apis/example.com/v2", "", http.StatusForbidden},
		{"the system CRDs", "GET", "/clusters/system:crds/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "", http.StatusForbidden},
		{"a CRD into the system cluster", "POST", "/clusters/system:crds/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crdBody, http.StatusForbidden},
		{"a CRD into b", "POST", "/clusters/" + b + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crdBody, http.StatusForbidden},
		{"a widget into b", "POST", "/clusters/" + b + "/apis/example.com/v2/namespaces/default/widgets", `{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"x"}}`, http.StatusForbidden},
	} {
		code, body := framework.Do(t, alice, tc.method, s.URL()+tc.path, tc.body)
		if code != tc.want {
			t.Errorf("%s: %s %s = %d, want %d: %s", tc.what, tc.method, tc.path, code, tc.want, body)
		}
		if (strings.Contains(body, "secret-widget") && !strings.Contains(tc.path, "secret-widget")) || strings.Contains(body, "The colour of the widget") {
			t.Errorf("%s: the answer shows b's data: %s", tc.what, body)
		}
	}
	// Nothing of b leaks into a's discovery or OpenAPI documents.
	for _, p := range []string{"/apis", "/openapi/v2", "/openapi/v3", "/apis/example.com/v1", "/openapi/v3/apis/example.com/v1"} {
		code, body := framework.Do(t, alice, "GET", s.URL()+"/clusters/"+a+p, "")
		if code != http.StatusOK {
			t.Errorf("GET %s in a = %d: %s", p, code, body)
		}
		if strings.Contains(body, "example.com/v2") || strings.Contains(body, "The colour of the widget") || strings.Contains(body, "com.example.v2.Widget") {
			t.Errorf("GET %s in a shows b's CRD", p)
		}
	}
	// The system CRDs are untouched and still served to a.
	framework.MustContain(t, "system CRDs", s.Kubectl("system:crds", "get", "crd", "-o", "name"), "workspaces.tenancy.kcp.io")
	framework.MustNotContain(t, "system CRDs", s.Kubectl("system:crds", "get", "crd", "-o", "name"), "evils")
	if code, body := framework.Do(t, alice, "GET", s.URL()+"/clusters/"+a+"/apis/tenancy.kcp.io/v1alpha1/workspaces", ""); code != http.StatusOK {
		t.Errorf("workspaces in a: %d %s", code, body)
	}
}
