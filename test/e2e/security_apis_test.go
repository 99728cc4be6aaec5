package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// reservedSchema is an APIResourceSchema of plural.group.
func reservedSchema(plural, kind, group string) string {
	return fmt.Sprintf(`apiVersion: apis.kcp.io/v1alpha1
kind: APIResourceSchema
metadata: {name: v1.%s.%s}
spec:
  group: %s
  scope: Cluster
  names: {plural: %s, singular: %s, kind: %s, listKind: %sList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`, plural, group, group, plural, strings.ToLower(kind), kind, kind)
}

// TestAPISharingIdentityAttempts is issue 49's rows 2 to 4: a provider
// tries to make its export's view reach kcp's own APIs and act as the
// server, to widen the claims a consumer granted, and tenants try to carry
// an identity from their own workspace into another one (a service
// account named like a granted one, impersonation) to bind an export or
// use a location.
func TestAPISharingIdentityAttempts(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:platform", "root:other-provider", "root:team-a", "root:mallory", "root:alice", "root:compute")
	labelled := `{matchLabels: {platform.example.com/db: "true"}}`
	publishDatabases(t, s, "root:platform", "", "  permissionClaims:\n"+
		"  - {resource: serviceaccounts, verbs: [get, create]}\n"+
		"  - {resource: serviceaccounts/token, verbs: [create]}\n"+
		"  - {resource: configmaps, verbs: [get, create, patch], labelSelector: "+labelled+"}\n"+
		"  - {group: apis.kcp.io, resource: apibindings, verbs: [create]}\n"+
		"  - {group: rbac.authorization.k8s.io, resource: roles, verbs: [create]}\n")
	publishDatabases(t, s, "root:other-provider", "", "")
	s.Kubectl("root:platform", "create", "clusterrole", "db-operator", "--verb=content", "--resource=apiexports.apis.kcp.io", "--resource-name=databases")
	s.Kubectl("root:platform", "create", "clusterrolebinding", "db-operator", "--clusterrole=db-operator", "--user=db-operator")
	for _, ws := range []string{"root:mallory", "root:alice"} {
		who := strings.TrimPrefix(ws, "root:")
		s.Kubectl("root", "create", "clusterrole", "access-"+who, "--verb=access", "--resource=workspaces/content", "--resource-name="+who)
		s.Kubectl("root", "create", "clusterrolebinding", "access-"+who, "--clusterrole=access-"+who, "--user="+who)
		s.Kubectl(ws, "create", "clusterrolebinding", "admin-"+who, "--clusterrole=cluster-admin", "--user="+who)
	}
	// team-a binds and accepts every claim (it trusts the provider with
	// exactly these).
	out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "bind", "export", "root:platform:databases", "--server", s.URL()+"/clusters/root:team-a",
		"--accept", "serviceaccounts=get,create", "--accept", "configmaps=get,create,patch", "--accept", "apibindings.apis.kcp.io=create", "--accept", "roles.rbac.authorization.k8s.io=create")
	if err != nil {
		t.Fatalf("binding in root:team-a: %v\n%s", err, out)
	}
	s.Kubectl("root:team-a", "create", "serviceaccount", "ci")
	s.Kubectl("root:team-a", "create", "configmap", "db-config", "--from-literal=size=1")
	s.Kubectl("root:team-a", "label", "configmap", "db-config", "platform.example.com/db=true")
	s.Kubectl("root:team-a", "create", "configmap", "private", "--from-literal=password=secret")

	provider := framework.UserClient(t, s, "db-operator")
	view := s.URL() + "/services/apiexport/root:platform/databases/clusters/root:team-a"
	framework.Eventually(t, 20*time.Second, "the claims granted through the view", func() (bool, string) {
		code, body := framework.DoWith(t, provider, "GET", view+"/api/v1/namespaces/default/serviceaccounts/ci", "", nil)
		return code == 200, body
	})

	// Row 9: requests through the view are the provider's in fairness:
	// root's kcp-tenants level, not exempt (the view's identity used to be
	// in system:masters), in one consumer and across all.
	pl, err := s.Client("root").FlowcontrolV1().PriorityLevelConfigurations().Get(context.Background(), "kcp-tenants", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{view + "/api/v1/namespaces/default/serviceaccounts/ci", s.URL() + "/services/apiexport/root:platform/databases/clusters/*/apis/platform.example.com/v1/databases"} {
		resp, err := provider.Get(path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"); resp.StatusCode != 200 || got != string(pl.UID) {
			t.Errorf("GET %s through the view: %d, priority level %q, want kcp-tenants %q", path, resp.StatusCode, got, pl.UID)
		}
	}

	// Row 2: a schema of a group kcp or Kubernetes serves is refused, so
	// an export cannot name Workspaces, APIBindings or Secrets.
	for _, c := range []struct{ plural, kind, group string }{
		{"workspaces", "Workspace", "tenancy.kcp.io"},
		{"apibindings", "APIBinding", "apis.kcp.io"},
		{"clusterroles", "ClusterRole", "rbac.authorization.k8s.io"},
		{"gadgets", "Gadget", "kcp.io"},
		{"ingresses", "Ingress", "networking.k8s.io"},
	} {
		out, err := s.KubectlErr("root:mallory", reservedSchema(c.plural, c.kind, c.group), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, "is an API group of Kubernetes or kcp") {
			t.Errorf("an APIResourceSchema of %s.%s: %v\n%s", c.plural, c.group, err, out)
		}
	}
	// A group of one's own is fine.
	if out, err := s.KubectlErr("root:mallory", reservedSchema("gadgets", "Gadget", "mallory.example.com"), "apply", "-f", "-"); err != nil {
		t.Errorf("an APIResourceSchema of an own group: %v\n%s", err, out)
	}

	// Row 2: the view acts as the provider, not as the server. Through
	// accepted claims on apibindings and roles, the provider can create
	// what the provider itself may: no binding of an export it may not
	// bind, no Role granting what it does not have.
	binding := `{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIBinding","metadata":{"name":"sneaky"},"spec":{"reference":{"export":{"path":"root:other-provider","name":"databases"}}}}`
	if code, body := framework.DoWith(t, provider, "POST", view+"/apis/apis.kcp.io/v1alpha1/apibindings", binding, nil); code != 403 || !strings.Contains(body, "may not bind APIExport databases of workspace root:other-provider") {
		t.Errorf("the provider binding another export in its consumer: %d %s", code, body)
	}
	role := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"grab","namespace":"default"},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]}]}`
	if code, body := framework.DoWith(t, provider, "POST", view+"/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role, nil); code != 403 {
		t.Errorf("the provider creating a Role that grants secrets in its consumer: %d %s", code, body)
	}
	if out := s.Kubectl("root:team-a", "get", "apibindings,roles", "-A", "-o", "name"); strings.Contains(out, "sneaky") || strings.Contains(out, "grab") {
		t.Errorf("objects the provider could not create are there:\n%s", out)
	}

	// Row 4: a claim covers its resource, not its subresources: creating
	// service accounts does not mint tokens.
	if code, body := framework.DoWith(t, provider, "POST", view+"/api/v1/namespaces/default/serviceaccounts", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"made-by-provider"}}`, nil); code != 201 {
		t.Errorf("creating a service account through the claim: %d %s", code, body)
	}
	tokenRequest := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":[]}}`
	if code, body := framework.DoWith(t, provider, "POST", view+"/api/v1/namespaces/default/serviceaccounts/ci/token", tokenRequest, nil); code != 403 || strings.Contains(body, `"token"`) {
		t.Errorf("minting a token through a claim on serviceaccounts: %d %s", code, body)
	}

	// A subresource claimed by name, once accepted, is granted.
	s.Kubectl("root:team-a", "patch", "apibinding", "databases", "--type=json", "-p",
		`[{"op":"add","path":"/spec/permissionClaims/-","value":{"resource":"serviceaccounts/token","verbs":["create"],"state":"Accepted"}}]`)
	framework.Eventually(t, 20*time.Second, "a token through the accepted claim on serviceaccounts/token", func() (bool, string) {
		code, body := framework.DoWith(t, provider, "POST", view+"/api/v1/namespaces/default/serviceaccounts/ci/token", tokenRequest, nil)
		return code == 201 && strings.Contains(body, `"token"`), body
	})

	// Row 4: a label-limited claim with patch cannot take the label off,
	// in any patch dialect, nor create an object the server stores
	// without it (keys repeated in another letter case).
	cm := view + "/api/v1/namespaces/default/configmaps/db-config"
	for _, p := range []struct{ kind, contentType, body string }{
		{"merge", "application/merge-patch+json", `{"metadata":{"labels":{"platform.example.com/db":null}}}`},
		{"merge, case-folded", "application/merge-patch+json", `{"metadata":{"labels":{"platform.example.com/db":"true"}},"METADATA":{"labels":{"platform.example.com/db":"true"}},"metadata":{"labels":{"platform.example.com/db":null}}}`},
		{"json", "application/json-patch+json", `[{"op":"remove","path":"/metadata/labels/platform.example.com~1db"}]`},
		{"json, case-folded", "application/json-patch+json", `[{"op":"replace","path":"/data/size","value":"2","OP":"remove","PATH":"/metadata/labels"}]`},
		{"strategic, replace", "application/strategic-merge-patch+json", `{"metadata":{"labels":{"$patch":"replace","other":"x"}}}`},
		{"strategic, delete", "application/strategic-merge-patch+json", `{"metadata":{"labels":{"platform.example.com/db":null}}}`},
	} {
		// Refused, or applied exactly as checked: the label stays.
		code, body := doWithType(t, provider, "PATCH", cm, p.body, p.contentType)
		if out := s.Kubectl("root:team-a", "get", "configmap", "db-config", "-o", "jsonpath={.metadata.labels}"); !strings.Contains(out, "platform.example.com/db") {
			t.Fatalf("a %s patch through the label-limited claim took the label off: %d %s", p.kind, code, body)
		}
		if code < 400 && p.kind != "json, case-folded" {
			t.Errorf("a %s patch through the label-limited claim: %d %s", p.kind, code, body)
		}
	}
	if code, body := doWithType(t, provider, "PATCH", cm+"?fieldManager=x", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"db-config","labels":{}}}`, "application/apply-patch+yaml"); code != 415 {
		t.Errorf("server-side apply through the label-limited claim: %d %s", code, body)
	}
	if out := s.Kubectl("root:team-a", "get", "configmap", "db-config", "-o", "jsonpath={.metadata.labels}"); !strings.Contains(out, "platform.example.com/db") {
		t.Fatalf("the claim's label was taken off: %s", out)
	}
	if code, body := doWithType(t, provider, "PATCH", cm, `{"data":{"size":"3"}}`, "application/merge-patch+json"); code != 200 || !strings.Contains(body, `"size":"3"`) {
		t.Errorf("a patch within the claim: %d %s", code, body)
	}
	if code, body := doWithType(t, provider, "PATCH", view+"/api/v1/namespaces/default/configmaps/private", `{"data":{"password":"mine"}}`, "application/merge-patch+json"); code != 404 {
		t.Errorf("a patch of a configmap outside the claim: %d %s", code, body)
	}
	folded := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"unlabelled","namespace":"default"},"Metadata":{"labels":{"platform.example.com/db":"true"}}}`
	if code, body := framework.DoWith(t, provider, "POST", view+"/api/v1/namespaces/default/configmaps", folded, nil); code != 403 {
		t.Errorf("creating a configmap the server stores without the claim's label: %d %s", code, body)
	}
	if out, err := s.KubectlErr("root:team-a", "", "get", "configmap", "unlabelled"); err == nil {
		t.Errorf("the unlabelled configmap was created:\n%s", out)
	}

	// Row 3: a service account is itself only in its own workspace.
	// root:platform grants bind to its own ServiceAccount default/ci;
	// mallory's default/ci is not it. A grant to the foreign name is.
	if out, err := s.KubectlErr("root:platform", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bind-databases}
rules: [{apiGroups: [apis.kcp.io], resources: [apiexports], resourceNames: [databases], verbs: [bind]}]
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s.Kubectl("root:platform", "create", "clusterrolebinding", "ci-binds", "--clusterrole=bind-databases", "--serviceaccount=default:ci")
	s.Kubectl("root:platform", "create", "clusterrolebinding", "builder-binds", "--clusterrole=bind-databases", "--user=system:kcp:serviceaccount:root:mallory:default:builder")
	s.Kubectl("root:platform", "create", "clusterrolebinding", "alice-binds", "--clusterrole=bind-databases", "--user=alice")
	for _, sa := range []string{"ci", "builder"} {
		s.Kubectl("root:mallory", "create", "serviceaccount", sa)
		s.Kubectl("root:mallory", "create", "clusterrolebinding", "sa-admin-"+sa, "--clusterrole=cluster-admin", "--serviceaccount=default:"+sa)
	}
	bindingIn := func(name string) string {
		return fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIBinding","metadata":{"name":%q},"spec":{"reference":{"export":{"path":"root:platform","name":"databases"}}}}`, name)
	}
	bindings := s.URL() + "/clusters/root:mallory/apis/apis.kcp.io/v1alpha1/apibindings"
	withToken := func(sa string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + strings.TrimSpace(s.Kubectl("root:mallory", "create", "token", sa))}
	}
	tokenClient := insecureClient(t, s) // the token alone authenticates
	if code, body := framework.DoWith(t, tokenClient, "POST", bindings, bindingIn("as-ci"), withToken("ci")); code != 403 || !strings.Contains(body, "may not bind") {
		t.Errorf("mallory's default/ci binding with root:platform's default/ci grant: %d %s", code, body)
	}
	if code, body := framework.DoWith(t, tokenClient, "POST", bindings, bindingIn("as-builder"), withToken("builder")); code != 201 {
		t.Errorf("mallory's default/builder binding with a grant to its foreign name: %d %s", code, body)
	}

	// Row 3: impersonation is honoured in the workspace that allowed it,
	// not in the provider's or the location's. alice may enter
	// root:mallory (a shared team workspace, say), where mallory is admin.
	s.Kubectl("root", "create", "clusterrolebinding", "alice-in-mallory", "--clusterrole=access-mallory", "--user=alice")
	s.Kubectl("root:mallory", "create", "clusterrolebinding", "alice-admin", "--clusterrole=cluster-admin", "--user=alice")
	s.Kubectl("root", "create", "clusterrole", "access-compute", "--verb=access", "--resource=workspaces/content", "--resource-name=compute")
	s.Kubectl("root", "create", "clusterrolebinding", "alice-in-compute", "--clusterrole=access-compute", "--user=alice")
	mallory := framework.UserClient(t, s, "mallory")
	asAlice := map[string]string{"Impersonate-User": "alice"}
	if code, body := framework.DoWith(t, mallory, "POST", bindings, bindingIn("as-alice"), asAlice); code != 403 || !strings.Contains(body, `\"mallory\" may not bind`) {
		t.Errorf("mallory binding as alice: %d %s", code, body)
	}
	if code, body := framework.DoWith(t, framework.UserClient(t, s, "alice"), "POST", s.URL()+"/clusters/root:alice/apis/apis.kcp.io/v1alpha1/apibindings", bindingIn("alice"), nil); code != 201 {
		t.Errorf("alice binding herself: %d %s", code, body)
	}
	if out, err := s.KubectlErr("root:compute", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: use-targets}
rules: [{apiGroups: [workload.kcp.io], resources: [synctargets], verbs: [use]}]
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s.Kubectl("root:compute", "create", "clusterrolebinding", "alice-uses", "--clusterrole=use-targets", "--user=alice")
	placement := `{"apiVersion":"workload.kcp.io/v1alpha1","kind":"Placement","metadata":{"name":"p"},"spec":{"locationWorkspace":"root:compute","namespaceSelector":{}}}`
	if code, body := framework.DoWith(t, mallory, "POST", s.URL()+"/clusters/root:mallory/apis/workload.kcp.io/v1alpha1/placements", placement, asAlice); code != 403 || !strings.Contains(body, `\"mallory\" may not use the SyncTargets`) {
		t.Errorf("mallory placing as alice: %d %s", code, body)
	}
	if code, body := framework.DoWith(t, framework.UserClient(t, s, "alice"), "POST", s.URL()+"/clusters/root:alice/apis/workload.kcp.io/v1alpha1/placements", placement, nil); code != 201 {
		t.Errorf("alice placing herself: %d %s", code, body)
	}
}

// TestImpersonatedServiceAccountIsTheWorkspaces (issue 50 item 4): an
// admin of a workspace impersonating one of its service accounts
// (kubectl --as=system:serviceaccount:NS:NAME), or asking an access review
// about one, is judged as that service account by the workspace's RBAC;
// a user that merely authenticates with such a name is not (rows in
// TestTenantAdminCannotEscape).
func TestImpersonatedServiceAccountIsTheWorkspaces(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:team")
	s.Kubectl("root:team", "create", "serviceaccount", "ci")
	s.Kubectl("root:team", "create", "configmap", "settings", "--from-literal=a=b")
	sa := "system:serviceaccount:default:ci"
	if out, err := s.KubectlErr("root:team", "", "auth", "can-i", "get", "configmaps", "--as="+sa); err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("can-i as the service account before any grant: %v %q, want a plain no", err, out)
	}
	s.Kubectl("root:team", "create", "role", "read-cm", "--verb=get,list", "--resource=configmaps")
	s.Kubectl("root:team", "create", "rolebinding", "ci-reads", "--role=read-cm", "--serviceaccount=default:ci")
	framework.Eventually(t, 20*time.Second, "can-i as the service account after the grant", func() (bool, string) {
		out, err := s.KubectlErr("root:team", "", "auth", "can-i", "get", "configmaps", "--as="+sa)
		return err == nil && strings.TrimSpace(out) == "yes", out
	})
	if out := s.Kubectl("root:team", "get", "configmap", "settings", "--as="+sa, "-o", "name"); strings.TrimSpace(out) != "configmap/settings" {
		t.Errorf("get as the service account: %q", out)
	}
	if out, err := s.KubectlErr("root:team", "", "get", "secrets", "--as="+sa); err == nil || !strings.Contains(out, "forbidden") || strings.Contains(out, "may not access it") {
		t.Errorf("what the grant does not cover: %v\n%s", err, out)
	}
	sar := `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"` + sa + `","groups":["system:serviceaccounts","system:serviceaccounts:default","system:authenticated"],"resourceAttributes":{"namespace":"default","verb":"get","resource":"configmaps"}}}`
	code, body := framework.DoWith(t, framework.UserClient(t, s, "admin", "system:masters"), "POST", s.URL()+"/clusters/root:team/apis/authorization.k8s.io/v1/subjectaccessreviews", sar, nil)
	if code != 201 || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("a SubjectAccessReview about the workspace's service account: %d %s", code, body)
	}
}
