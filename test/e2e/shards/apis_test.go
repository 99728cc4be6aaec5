package shards

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

var databasesGVR = schema.GroupVersionResource{Group: "platform.example.com", Version: "v1", Resource: "databases"}

// databasesExport is a schema of databases.platform.example.com (named
// <version>.databases...) with extra spec fields, and the APIExport
// "databases" serving it.
func databasesExport(version, extraFields string, extraSpec ...string) string {
	return fmt.Sprintf(`apiVersion: apis.kcp.io/v1alpha1
kind: APIResourceSchema
metadata: {name: %s.databases.platform.example.com}
spec:
  group: platform.example.com
  scope: Namespaced
  names: {plural: databases, singular: database, kind: Database, listKind: DatabaseList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer, description: size in GiB}%s}}
          status: {type: object, properties: {phase: {type: string}}}
---
apiVersion: apis.kcp.io/v1alpha1
kind: APIExport
metadata: {name: databases}
spec:
  latestResourceSchemas: [%s.databases.platform.example.com]
`, version, extraFields, version) + strings.Join(extraSpec, "")
}

const bindRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bind-databases}
rules: [{apiGroups: [apis.kcp.io], resources: [apiexports], resourceNames: [databases], verbs: [bind]}]
`

func database(name string, size int) string {
	return fmt.Sprintf("apiVersion: platform.example.com/v1\nkind: Database\nmetadata: {name: %s, namespace: default}\nspec: {size: %d}\n", name, size)
}

// TestAPISharingAcrossShards: a provider on the root shard (SQLite), a
// consumer on shard-1 (PostgreSQL) and one on the root shard, everything
// through the front proxy: binding with kubectl kcp bind, the consumer
// served from the export's schema (CRUD, watch, discovery, explain), a new
// schema version reaching the consumer, the bind permission decided by the
// provider's shard, a tenant's export of the same name not hijacking the
// binding, consumers isolated, the provider's view through the proxy
// across both shards (list, watch, a status write and a claimed resource
// on the consumer's shard; content decided by the provider's shard), a
// shard asked directly refusing rather than answering in part, the export
// protected while bound from another shard, and the consumer served while
// the provider's shard is down (the view then 503).
func TestAPISharingAcrossShards(t *testing.T) {
	in := framework.StartShards(t, []string{"", framework.DatastoreFor(t, framework.Postgres)}, 1)
	root, other := in.Shards["root"], in.Shards["shard-1"]
	p := in.Proxies[0]
	ctx := context.Background()

	for _, w := range []struct{ name, shard string }{{"provider", "root"}, {"near", "root"}, {"far", "shard-1"}, {"mallory", "shard-1"}} {
		p.KubectlApply("root", fmt.Sprintf("apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: %s}\nspec: {shard: %s}\n", w.name, w.shard))
	}
	for _, w := range []string{"provider", "near", "far", "mallory"} {
		framework.Eventually(t, 60*time.Second, "workspace root:"+w+" Ready", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspace", w, "-o", "jsonpath={.status.phase}")
			return out == "Ready", out
		})
	}

	claims := "  permissionClaims:\n  - {resource: configmaps, verbs: [get, list]}\n"
	p.KubectlApply("root:provider", databasesExport("v1", "", claims))
	var identity string
	framework.Eventually(t, 30*time.Second, "the export's Ready condition and identity", func() (bool, string) {
		out, _ := p.KubectlErr("root:provider", "", "get", "apiexport", "databases", "-o", "jsonpath={.status.conditions[0].status} {.status.identityHash}")
		identity = strings.TrimPrefix(out, "True ")
		return strings.HasPrefix(out, "True ") && len(identity) > 5, out
	})

	// kubectl kcp bind through the proxy, from a workspace on each shard.
	kubectlKCP := func(kubeconfig string, args ...string) (string, error) {
		_, kubectl := framework.Binaries(t)
		cmd := exec.Command(kubectl, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"),
			"KUBECACHEDIR="+filepath.Join(p.RootDir, "kubecache"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []string{"root:far", "root:near"} {
		// root:far accepts the claim on its configmaps, root:near not.
		accept := map[string][]string{"root:far": {"--accept", "configmaps=get,list"}}[c]
		out, err := kubectlKCP(p.Kubeconfig, append([]string{"kcp", "bind", "export", "root:provider:databases", "--server", p.URL() + "/clusters/" + c}, accept...)...)
		if err != nil {
			t.Fatalf("kubectl kcp bind in %s through the proxy: %v\n%s", c, err, out)
		}
		framework.MustContain(t, "kubectl kcp bind in "+c, out, "is bound: databases.platform.example.com")
		got := p.Kubectl(c, "get", "apibinding", "databases", "-o", "jsonpath={.status.phase} {.status.identityHash}")
		if got != "Bound "+identity {
			t.Fatalf("the binding in %s says %q; want Bound with the export's identity %s", c, got, identity)
		}
		framework.MustContain(t, "api-resources in "+c, p.Kubectl(c, "api-resources", "--api-group=platform.example.com"), "databases", "Database")
		framework.MustContain(t, "explain in "+c, p.Kubectl(c, "explain", "databases.spec.size"), "size in GiB")
	}

	// CRUD and watch in the consumer on shard-1; the schema is enforced.
	far, err := dynamic.NewForConfig(p.Config("root:far"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := far.Resource(databasesGVR).Namespace("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		_, direct := far.Resource(databasesGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		t.Fatalf("watching databases in root:far through the proxy: %v (list: %v)\nshard-1:\n%s\nproxy:\n%s", err, direct, other.LogTail(40), p.LogTail(20))
	}
	defer w.Stop()
	for _, c := range []string{"root:far", "root:near"} {
		p.KubectlApply(c, database("db0", map[string]int{"root:far": 7, "root:near": 3}[c]))
	}
	waitEvent(t, w, watch.Added, "db0")
	p.KubectlApply("root:far", database("db0", 8))
	waitEvent(t, w, watch.Modified, "db0")
	if got := p.Kubectl("root:far", "get", "database", "db0", "-n", "default", "-o", "jsonpath={.spec.size}"); got != "8" {
		t.Fatalf("root:far's db0 has size %q, want 8 (its own)", got)
	}
	if got := p.Kubectl("root:near", "get", "database", "db0", "-n", "default", "-o", "jsonpath={.spec.size}"); got != "3" {
		t.Fatalf("root:near's db0 has size %q, want 3 (its own)", got)
	}
	if out, err := p.KubectlErr("root:far", strings.Replace(database("bad", 1), "size: 1", "size: big", 1), "apply", "-f", "-"); err == nil || !strings.Contains(out, "spec.size") {
		t.Fatalf("a database with size: big was not refused in root:far: %v\n%s", err, out)
	}
	p.KubectlApply("root:far", database("gone", 1))
	p.Kubectl("root:far", "delete", "database", "gone", "-n", "default")
	waitEvent(t, w, watch.Deleted, "gone")
	if liveRows(t, other, "root:far") == 0 || liveRows(t, root, "root:far") != 0 {
		t.Errorf("root:far's objects are not (only) on shard-1")
	}

	// A new schema version in the provider reaches the consumer on shard-1.
	p.KubectlApply("root:provider", databasesExport("v2", ", tier: {type: string, description: service tier}", claims))
	framework.Eventually(t, 30*time.Second, "the new schema in root:far", func() (bool, string) {
		out, err := p.KubectlErr("root:far", "", "explain", "databases.spec.tier")
		return err == nil && strings.Contains(out, "service tier"), out
	})
	p.KubectlApply("root:far", strings.Replace(database("tiered", 2), "size: 2", "size: 2, tier: gold", 1))
	if got := p.Kubectl("root:far", "get", "database", "tiered", "-n", "default", "-o", "jsonpath={.spec.tier}"); got != "gold" {
		t.Fatalf("the new field was pruned in root:far: %q", got)
	}

	// Binding needs the verb bind in the provider's workspace, decided by
	// the provider's shard: mallory, admin of root:mallory on shard-1,
	// is refused until root:provider grants it.
	p.Kubectl("root", "create", "clusterrole", "access-mallory", "--verb=access", "--resource=workspaces/content", "--resource-name=mallory")
	p.Kubectl("root", "create", "clusterrolebinding", "access-mallory", "--clusterrole=access-mallory", "--user=mallory")
	p.Kubectl("root:mallory", "create", "clusterrolebinding", "admin-mallory", "--clusterrole=cluster-admin", "--user=mallory")
	mallory := framework.UserClient(t, root, "mallory")
	bindings := p.URL() + "/clusters/root:mallory/apis/apis.kcp.io/v1alpha1/apibindings"
	binding := func(name, path string) string {
		return fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIBinding","metadata":{"name":%q},"spec":{"reference":{"export":{"path":%q,"name":"databases"}}}}`, name, path)
	}
	framework.Eventually(t, 20*time.Second, "mallory's rights in root:mallory", func() (bool, string) {
		code, body := framework.DoWith(t, mallory, http.MethodGet, bindings, "", nil)
		return code == http.StatusOK, body
	})
	code, body := framework.DoWith(t, mallory, http.MethodPost, bindings, binding("databases", "root:provider"), nil)
	if code != http.StatusForbidden || !strings.Contains(body, "may not bind APIExport databases") {
		t.Fatalf("mallory bound root:provider's export without the bind verb there: %d %s", code, body)
	}
	// The same answer for an export that does not exist anywhere.
	code, body2 := framework.DoWith(t, mallory, http.MethodPost, bindings, binding("nothing", "root:nowhere"), nil)
	if code != http.StatusForbidden || !strings.Contains(body2, "may not bind APIExport databases") {
		t.Fatalf("binding a missing export: %d %s", code, body2)
	}

	// A service account of root:mallory named like root:provider's service
	// account that may bind: the provider's shard sees it as root:mallory's
	// (its foreign name), not as its own, and refuses.
	p.Kubectl("root:provider", "create", "serviceaccount", "robot", "-n", "default")
	p.KubectlApply("root:provider", bindRole+`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: robot-binds}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bind-databases}
subjects: [{kind: ServiceAccount, name: robot, namespace: default}]
`)
	p.Kubectl("root:mallory", "create", "serviceaccount", "robot", "-n", "default")
	p.Kubectl("root:mallory", "create", "clusterrolebinding", "robot-admin", "--clusterrole=cluster-admin", "--serviceaccount=default:robot")
	token := map[string]string{"Authorization": "Bearer " + strings.TrimSpace(p.Kubectl("root:mallory", "create", "token", "robot", "-n", "default"))}
	anonCfg := p.Config("root")
	anonCfg.CertData, anonCfg.KeyData, anonCfg.CertFile, anonCfg.KeyFile = nil, nil, "", ""
	anonTLS, err := rest.TLSConfigFor(anonCfg)
	if err != nil {
		t.Fatal(err)
	}
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: anonTLS}}
	framework.Eventually(t, 20*time.Second, "root:mallory's robot's rights", func() (bool, string) {
		code, body := framework.DoWith(t, anon, http.MethodGet, bindings, "", token)
		return code == http.StatusOK, fmt.Sprint(code, body)
	})
	code, body = framework.DoWith(t, anon, http.MethodPost, bindings, binding("robot", "root:provider"), token)
	if code != http.StatusForbidden || !strings.Contains(body, "may not bind APIExport databases") {
		t.Fatalf("root:mallory's service account bound with root:provider's service account's grant: %d %s", code, body)
	}

	// mallory publishes an export of the same name and resource in its own
	// workspace on shard-1 (a different schema): root:far's binding keeps
	// the provider's identity and schema, and mallory's own binding of its
	// export sees none of root:far's objects.
	p.KubectlApply("root:mallory", strings.Replace(databasesExport("v1", ", stolen: {type: string}"), "size in GiB", "mallory's size", 1))
	code, body = framework.DoWith(t, mallory, http.MethodPost, bindings, binding("databases", "root:mallory"), nil)
	if code != http.StatusCreated {
		t.Fatalf("mallory binding its own export: %d %s", code, body)
	}
	framework.Eventually(t, 30*time.Second, "mallory's binding Bound", func() (bool, string) {
		out, _ := p.KubectlErr("root:mallory", "", "get", "apibinding", "databases", "-o", "jsonpath={.status.phase} {.status.identityHash}")
		return strings.HasPrefix(out, "Bound ") && out != "Bound "+identity, out
	})
	// (mallory's binding is Bound: the shards' indexes have its export.)
	if got := p.Kubectl("root:far", "get", "apibinding", "databases", "-o", "jsonpath={.status.phase} {.status.identityHash}"); got != "Bound "+identity {
		t.Fatalf("after mallory's export of the same name, root:far's binding says %q; want Bound %s", got, identity)
	}
	framework.MustContain(t, "explain in root:far", p.Kubectl("root:far", "explain", "databases.spec.size"), "size in GiB")
	code, body = framework.DoWith(t, mallory, http.MethodGet, p.URL()+"/clusters/root:mallory/apis/platform.example.com/v1/databases", "", nil)
	if code != http.StatusOK || strings.Contains(body, "db0") || strings.Contains(body, "tiered") {
		t.Fatalf("mallory's databases: %d %s", code, body)
	}
	code, body = framework.DoWith(t, mallory, http.MethodGet, p.URL()+"/clusters/root:far/apis/platform.example.com/v1/namespaces/default/databases/db0", "", nil)
	if code == http.StatusOK {
		t.Fatalf("mallory read root:far's database: %s", body)
	}

	// Granted bind in root:provider, mallory may bind it too (the SAR on
	// the provider's shard says yes); its objects are its own: the same
	// export and name as root:far's on the same shard, kept apart.
	code, body = framework.DoWith(t, mallory, http.MethodDelete, bindings+"/databases", "", nil)
	if code != http.StatusOK {
		t.Fatalf("mallory unbinding its own export: %d %s", code, body)
	}
	framework.Eventually(t, 30*time.Second, "mallory's own binding gone", func() (bool, string) {
		code, body := framework.DoWith(t, mallory, http.MethodGet, bindings+"/databases", "", nil)
		return code == http.StatusNotFound, fmt.Sprint(code, body)
	})
	p.KubectlApply("root:provider", bindRole+`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: mallory-binds}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bind-databases}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: mallory}]
`)
	framework.Eventually(t, 30*time.Second, "mallory may bind root:provider's export", func() (bool, string) {
		code, body := framework.DoWith(t, mallory, http.MethodPost, bindings, binding("granted", "root:provider"), nil)
		return code == http.StatusCreated, fmt.Sprint(code, body)
	})
	framework.Eventually(t, 30*time.Second, "mallory's binding of root:provider Bound", func() (bool, string) {
		out, _ := p.KubectlErr("root:mallory", "", "get", "apibinding", "granted", "-o", "jsonpath={.status.phase} {.status.identityHash}")
		return out == "Bound "+identity, out
	})
	malloryDBs := p.URL() + "/clusters/root:mallory/apis/platform.example.com/v1/namespaces/default/databases"
	framework.Eventually(t, 30*time.Second, "mallory creating its db0", func() (bool, string) {
		code, body := framework.DoWith(t, mallory, http.MethodPost, malloryDBs,
			`{"apiVersion":"platform.example.com/v1","kind":"Database","metadata":{"name":"db0","namespace":"default"},"spec":{"size":99}}`, nil)
		return code == http.StatusCreated, fmt.Sprint(code, body)
	})
	code, body = framework.DoWith(t, mallory, http.MethodGet, malloryDBs, "", nil)
	if code != http.StatusOK || strings.Count(body, `"name":"db0"`) != 1 || !strings.Contains(body, `"size":99`) || strings.Contains(body, "tiered") {
		t.Fatalf("mallory's databases of root:provider's export: %d %s", code, body)
	}
	if got := p.Kubectl("root:far", "get", "database", "db0", "-n", "default", "-o", "jsonpath={.spec.size}"); got != "8" {
		t.Fatalf("root:far's db0 has size %q after mallory's db0, want 8", got)
	}

	// The provider's view through the proxy spans the shards: db-operator,
	// granted the verb content in root:provider, lists and watches the
	// databases of root:near (root shard), root:far and root:mallory
	// (shard-1), and writes the status of root:far's on its shard.
	p.KubectlApply("root:provider", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: db-operator}
rules: [{apiGroups: [apis.kcp.io], resources: [apiexports], resourceNames: [databases], verbs: [content]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: db-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: db-operator}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: db-operator}]
`)
	operator := framework.UserClient(t, root, "db-operator")
	viewURL := func(cluster string) string {
		return p.URL() + "/services/apiexport/root:provider/databases/clusters/" + cluster + "/apis/platform.example.com/v1/"
	}
	var listed string
	framework.Eventually(t, 30*time.Second, "the view across shards", func() (bool, string) {
		code, body := framework.DoWith(t, operator, http.MethodGet, viewURL("*")+"databases", "", nil)
		listed = body
		return code == http.StatusOK, fmt.Sprint(code, body)
	})
	for _, want := range []string{`"size":3`, `"size":8`, `"size":99`, `"name":"tiered"`} {
		framework.MustContain(t, "the view's list across shards", listed, want)
	}
	framework.MustContain(t, "the view's list across shards", listed, `"resourceVersion":"shards.`)
	opCfg := framework.UserConfig(t, root, "db-operator")
	opCfg.Host = p.URL() + "/services/apiexport/root:provider/databases/clusters/*"
	opView, err := dynamic.NewForConfig(opCfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := opView.Resource(databasesGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 4 {
		t.Fatalf("the view's list across shards with client-go: %v %d items", err, len(list.Items))
	}
	vw, err := opView.Resource(databasesGVR).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watching the view across shards: %v", err)
	}
	defer vw.Stop()
	p.KubectlApply("root:far", database("seen", 5))
	waitEvent(t, vw, watch.Added, "seen")
	code, body = framework.DoWith(t, operator, http.MethodPatch, viewURL("root:far")+"namespaces/default/databases/db0/status",
		`{"status":{"phase":"Provisioned"}}`, map[string]string{"Content-Type": "application/merge-patch+json"})
	if code != http.StatusOK {
		t.Fatalf("writing root:far's status through the view: %d %s", code, body)
	}
	if got := p.Kubectl("root:far", "get", "database", "db0", "-n", "default", "-o", "jsonpath={.status.phase}"); got != "Provisioned" {
		t.Fatalf("root:far's db0 status after the view's write: %q", got)
	}
	// The claim: root:far's configmaps through the view (accepted), not
	// root:near's (not accepted).
	p.Kubectl("root:far", "create", "configmap", "claimed", "--from-literal=from=far")
	p.Kubectl("root:near", "create", "configmap", "claimed", "--from-literal=from=near")
	cms := func(cluster string) string {
		return p.URL() + "/services/apiexport/root:provider/databases/clusters/" + cluster + "/api/v1/namespaces/default/configmaps"
	}
	if code, body := framework.DoWith(t, operator, http.MethodGet, cms("root:far")+"/claimed", "", nil); code != http.StatusOK || !strings.Contains(body, `"from":"far"`) {
		t.Fatalf("root:far's claimed configmap through the view: %d %s", code, body)
	}
	if code, body := framework.DoWith(t, operator, http.MethodGet, cms("root:near")+"/claimed", "", nil); code == http.StatusOK {
		t.Fatalf("root:near's configmap through the view without an accepted claim: %s", body)
	}
	// As on one server, claimed resources are reached per consumer only.
	code, body = framework.DoWith(t, operator, http.MethodGet, p.URL()+"/services/apiexport/root:provider/databases/clusters/*/api/v1/configmaps", "", nil)
	if code != http.StatusForbidden || strings.Contains(body, `"from":`) {
		t.Fatalf("configmaps across consumers through the view: %d %s", code, body)
	}
	// Without the verb content, mallory is refused on either shard.
	for _, c := range []string{"*", "root:far", "root:near"} {
		code, body := framework.DoWith(t, mallory, http.MethodGet, viewURL(c)+"databases", "", nil)
		if code != http.StatusForbidden {
			t.Fatalf("mallory read the view of %s: %d %s", c, code, body)
		}
	}
	// A shard asked directly (not through the proxy) answers across all
	// consumers only if it holds them all: refused, never a part.
	for _, s := range []*framework.Server{root, other} {
		code, body := framework.DoWith(t, operator, http.MethodGet, s.URL()+"/services/apiexport/root:provider/databases/clusters/*/apis/platform.example.com/v1/databases", "", nil)
		if code != http.StatusNotImplemented || !strings.Contains(body, "front proxy") {
			t.Fatalf("a shard's own view across consumers on several shards: %d %s", code, body)
		}
	}
	// A workspace type's default binding of root:provider's export, for a
	// workspace on shard-1: bound there before the workspace is Ready.
	p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceType\nmetadata: {name: with-databases}\nspec:\n  defaultAPIBindings: [{path: \"root:provider\", export: databases}]\n")
	p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: typed}\nspec: {shard: shard-1, type: with-databases}\n")
	framework.Eventually(t, 60*time.Second, "the typed workspace Ready", func() (bool, string) {
		out, _ := p.KubectlErr("root", "", "get", "workspace", "typed", "-o", "jsonpath={.status.phase}")
		return out == "Ready", out
	})
	framework.Eventually(t, 30*time.Second, "the typed workspace's default binding Bound", func() (bool, string) {
		out, _ := p.KubectlErr("root:typed", "", "get", "apibindings", "-o", "jsonpath={.items[*].status.phase} {.items[*].status.identityHash}")
		return out == "Bound "+identity, out
	})
	if liveRows(t, other, "root:typed") == 0 {
		t.Errorf("root:typed is not on shard-1")
	}
	// The export cannot be deleted while root:far binds it.
	if out, err := p.KubectlErr("root:provider", "", "delete", "apiexport", "databases"); err == nil || !strings.Contains(out, "root:far") {
		t.Fatalf("deleting the export bound from shard-1: %v\n%s", err, out)
	}

	// The provider's shard down: root:far keeps being served.
	root.Stop()
	for i, name := range []string{"after1", "after2"} {
		if out, err := p.KubectlErr("root:far", database(name, i), "apply", "-f", "-"); err != nil {
			t.Fatalf("root:far with the provider's shard down: %v\n%s", err, out)
		}
	}
	items, err := far.Resource(databasesGVR).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(items.Items) != 5 {
		t.Fatalf("listing root:far's databases with the provider's shard down: %v %v", err, items)
	}
	code, body = framework.DoWith(t, operator, http.MethodGet, viewURL("*")+"databases", "", nil)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("the view with the provider's shard down answered %d %s", code, body)
	}

	// The provider's shard starts while shard-1 is down: it cannot tell who
	// binds the export there (root:far, ...), so its refusal to delete the
	// export says so; with root:near unbound, that alone refuses it.
	other.Stop()
	root.Start()
	out, err := p.KubectlErr("root:provider", "", "delete", "apiexport", "databases")
	if err == nil || !strings.Contains(out, "root:near") || !strings.Contains(out, "shard(s) shard-1 have not been reached") {
		t.Fatalf("deleting the export while shard-1 was never reached: %v\n%s", err, out)
	}
	p.Kubectl("root:near", "delete", "apibinding", "databases")
	out, err = p.KubectlErr("root:provider", "", "delete", "apiexport", "databases")
	if err == nil || !strings.Contains(out, "shard(s) shard-1 have not been reached") {
		t.Fatalf("deleting the export bound only on shard-1, never reached: %v\n%s", err, out)
	}
	// Nor can the provider's workspace, which holds the export, be deleted.
	out, err = p.KubectlErr("root", "", "delete", "workspace", "provider", "--wait=false")
	if err == nil || !strings.Contains(out, "root:provider, which holds APIExports,") || !strings.Contains(out, "shard(s) shard-1 have not been reached") {
		t.Fatalf("deleting the provider's workspace while shard-1 was never reached: %v\n%s", err, out)
	}
}

// waitEvent waits for an event of that type about the named object.
func waitEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended before %s %s", typ, name)
			}
			if u, isU := ev.Object.(*unstructured.Unstructured); isU && ev.Type == typ && u.GetName() == name {
				return
			}
		case <-timeout:
			t.Fatalf("no %s event of %s within 30s", typ, name)
		}
	}
}
