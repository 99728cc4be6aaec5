package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

var databasesGVR = schema.GroupVersionResource{Group: "platform.example.com", Version: "v1", Resource: "databases"}

// databaseSchema is an APIResourceSchema of databases.platform.example.com
// named <prefix>.databases.platform.example.com with extra spec fields.
func databaseSchema(prefix, extraFields string) string {
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
`, prefix, extraFields)
}

// publishDatabases publishes, in provider, a v1 schema of databases (with
// extra spec fields) and the APIExport "databases" serving it (with extra
// spec lines, indented two spaces).
func publishDatabases(t *testing.T, s *framework.Server, provider, extraFields, extraSpec string) {
	t.Helper()
	export := databaseSchema("v1", extraFields) + `---
apiVersion: apis.kcp.io/v1alpha1
kind: APIExport
metadata: {name: databases}
spec:
  latestResourceSchemas: [v1.databases.platform.example.com]
` + extraSpec
	if out, err := s.KubectlErr(provider, export, "apply", "-f", "-"); err != nil {
		t.Fatalf("publishing the export in %s: %v\n%s", provider, err, out)
	}
}

func database(name string, size int) string {
	return fmt.Sprintf("apiVersion: platform.example.com/v1\nkind: Database\nmetadata: {name: %s, namespace: default}\nspec: {size: %d}\n", name, size)
}

// viewConfig is a client configuration for an APIExport's view as user.
func viewConfig(t *testing.T, s *framework.Server, provider, export, user string, groups ...string) *rest.Config {
	cfg := framework.UserConfig(t, s, user, groups...)
	cfg.Host = s.URL() + "/services/apiexport/" + provider + "/" + export
	return cfg
}

// TestAPISharing: a provider exports an API, two consumers bind it and
// create objects, the provider's controller (a client-go informer on the
// export's view) reconciles both and writes their status; a workspace that
// did not bind sees nothing; a second provider of the same group and
// resource shares no data; the schema is switched to a new version;
// permission claims accepted and not; unbinding; a restart.
func TestAPISharing(t *testing.T) {
	for _, d := range []framework.Dialect{framework.SQLite, framework.Postgres} {
		t.Run(string(d), func(t *testing.T) { testAPISharing(t, framework.DatastoreFor(t, d)) })
	}
}

func testAPISharing(t *testing.T, datastore string) {
	s := framework.StartServer(t, datastore)
	s.CreateWorkspaces("root:platform", "root:platform2", "root:team-a", "root:team-b", "root:team-c", "root:outsider")
	ctx := context.Background()

	// The provider publishes the API and lets db-operator read its content.
	publishDatabases(t, s, "root:platform", "", "  permissionClaims:\n  - {resource: configmaps, verbs: [get, list]}\n"+
		"  - {resource: secrets, verbs: [get, list, update], labelSelector: {matchLabels: {platform.example.com/db: \"true\"}}}\n")
	s.Kubectl("root:platform", "create", "clusterrole", "db-operator", "--verb=content", "--resource=apiexports.apis.kcp.io", "--resource-name=databases")
	s.Kubectl("root:platform", "create", "clusterrolebinding", "db-operator", "--clusterrole=db-operator", "--user=db-operator")
	framework.Eventually(t, 20*time.Second, "the export's Ready condition and identity", func() (bool, string) {
		out, _ := s.KubectlErr("root:platform", "", "get", "apiexport", "databases", "-o", "jsonpath={.status.conditions[0].status} {.status.identityHash}")
		return strings.HasPrefix(out, "True ") && len(out) > 10, out
	})

	// Both consumers bind with the plugin (team-a accepts the claim) and
	// see the API as if it were their own CRD.
	bind := func(cluster string, extra ...string) string {
		t.Helper()
		out, err := s.KubectlPlugin(s.Kubeconfig, append([]string{"kcp", "bind", "export", "root:platform:databases", "--server", s.URL() + "/clusters/" + cluster}, extra...)...)
		if err != nil {
			t.Fatalf("binding in %s: %v\n%s", cluster, err, out)
		}
		return out
	}
	framework.MustContain(t, "kubectl kcp bind export", bind("root:team-a", "--accept", "configmaps=get,list", "--accept", "secrets=get,list,update"),
		"is bound: databases.platform.example.com", "secrets (get,list,update), limited to objects with the labels platform.example.com/db=true")
	bind("root:team-b")
	for _, c := range []string{"root:team-a", "root:team-b"} {
		framework.MustContain(t, "api-resources in "+c, s.Kubectl(c, "api-resources", "--api-group=platform.example.com"), "databases", "Database")
		framework.MustContain(t, "explain in "+c, s.Kubectl(c, "explain", "databases.spec.size"), "size in GiB")
	}
	for _, c := range []string{"root:team-a", "root:team-b"} {
		for i := 0; i < 3; i++ {
			if out, err := s.KubectlErr(c, database(fmt.Sprintf("db%d", i), 10+i), "apply", "-f", "-"); err != nil {
				t.Fatalf("creating a database in %s: %v\n%s", c, err, out)
			}
		}
	}
	// The schema is enforced in the consumer.
	if out, err := s.KubectlErr("root:team-a", strings.Replace(database("bad", 1), "size: 1", "size: big", 1), "apply", "-f", "-"); err == nil || !strings.Contains(out, "spec.size") {
		t.Fatalf("a database with size: big was not refused: %v\n%s", err, out)
	}
	// A workspace that did not bind has no such API.
	if out, err := s.KubectlErr("root:outsider", "", "get", "databases"); err == nil {
		t.Fatalf("root:outsider sees databases without a binding:\n%s", out)
	}

	// The provider's controller: one informer on the view across all
	// consumers; it marks each database Provisioned in its own workspace.
	view := viewConfig(t, s, "root:platform", "databases", "db-operator")
	inf, err := clusterinformer.Dynamic(view, databasesGVR)
	if err != nil {
		t.Fatal(err)
	}
	ctrlCtx, stopCtrl := context.WithCancel(ctx)
	defer stopCtrl()
	reconciled := sync.Map{}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) {
		u := obj.(*unstructured.Unstructured)
		cluster := clusterinformer.ClusterOf(u)
		go func() {
			d, err := dynamic.NewForConfig(clusterinformer.ForCluster(view, cluster))
			if err != nil {
				return
			}
			patch := []byte(`{"status":{"phase":"Provisioned"}}`)
			if _, err := d.Resource(databasesGVR).Namespace(u.GetNamespace()).Patch(ctrlCtx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err == nil {
				reconciled.Store(string(cluster)+"/"+u.GetName(), true)
			}
		}()
	}})
	inf.Start(ctrlCtx)
	if err := inf.WaitForCacheSync(ctrlCtx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"root:team-a", "root:team-b"} {
		framework.Eventually(t, 20*time.Second, "the provider's status on the databases of "+c, func() (bool, string) {
			out, _ := s.KubectlErr(c, "", "get", "databases", "-n", "default", "-o", "jsonpath={.items[*].status.phase}")
			return strings.Count(out, "Provisioned") == 3, out
		})
	}
	if got := viewClusters(t, inf); got != "root:team-a=3 root:team-b=3" {
		t.Fatalf("the view holds %s; want the 3 databases of each consumer", got)
	}

	// A second provider of the same group and resource, bound by team-c:
	// neither provider sees the other's consumers, and team-c's objects
	// live in the second export's key range.
	publishDatabases(t, s, "root:platform2", ", tier: {type: string}", "")
	if out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "bind", "export", "root:platform2:databases", "--server", s.URL()+"/clusters/root:team-c"); err != nil {
		t.Fatalf("binding the second export: %v\n%s", err, out)
	}
	if out, err := s.KubectlErr("root:team-c", strings.Replace(database("other", 5), "size: 5", "size: 5, tier: gold", 1), "apply", "-f", "-"); err != nil {
		t.Fatalf("creating a database in root:team-c: %v\n%s", err, out)
	}
	time.Sleep(time.Second)
	if got := viewClusters(t, inf); got != "root:team-a=3 root:team-b=3" {
		t.Fatalf("after another export's consumer wrote, the first view holds %s", got)
	}
	other := listView(t, viewConfig(t, s, "root:platform2", "databases", "admin", "system:masters"))
	if other != "root:team-c/other" {
		t.Fatalf("the second export's view lists %q; want only root:team-c/other", other)
	}

	// Permission claims: team-a accepted configmaps (get, list), team-b
	// did not; neither granted secrets or writes.
	s.Kubectl("root:team-a", "create", "configmap", "settings", "--from-literal=a=b")
	s.Kubectl("root:team-b", "create", "configmap", "settings", "--from-literal=a=b")
	// team-a's secrets: one with the claim's label, one without.
	s.Kubectl("root:team-a", "create", "secret", "generic", "db-creds", "--from-literal=password=p")
	s.Kubectl("root:team-a", "label", "secret", "db-creds", "platform.example.com/db=true")
	s.Kubectl("root:team-a", "create", "secret", "generic", "private", "--from-literal=key=k")
	secretPath := "root:team-a/api/v1/namespaces/default/secrets/"
	unlabel := func(name string) string {
		return `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"` + name + `","namespace":"default"},"data":{"password":"eA=="}}`
	}
	vc := framework.UserClient(t, s, "db-operator")
	base := s.URL() + "/services/apiexport/root:platform/databases/clusters/"
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "root:team-a/api/v1/namespaces/default/configmaps/settings", 200},
		{"GET", "root:team-a/api/v1/configmaps", 200},
		{"DELETE", "root:team-a/api/v1/namespaces/default/configmaps/settings", 403},
		{"GET", secretPath + "db-creds", 200},
		{"GET", secretPath + "private", 404},
		{"DELETE", secretPath + "db-creds", 403},
		{"GET", "root:team-b/api/v1/configmaps", 403},
		{"GET", "*/api/v1/configmaps", 403},
		{"GET", "root:outsider/apis/platform.example.com/v1/databases", 404},
		{"GET", "root:team-c/apis/platform.example.com/v1/databases", 404},
		{"DELETE", "*/apis/platform.example.com/v1/namespaces/default/databases/db0", 403},
	} {
		code, body := framework.DoWith(t, vc, c.method, base+c.path, "", nil)
		if code != c.want {
			t.Errorf("%s %s through the view: %d, want %d\n%s", c.method, c.path, code, c.want, body)
		}
	}
	// The label-limited claim: a list shows only labelled secrets, with or
	// without a selector of the caller's; an update may not take the
	// label off, nor reach a secret without it.
	for _, q := range []string{"", "?labelSelector=platform.example.com/db!=true", "?labelSelector=kubernetes.io/service-account.name!=x"} {
		code, body := framework.DoWith(t, vc, "GET", base+"root:team-a/api/v1/secrets"+q, "", nil)
		if code != 200 || strings.Contains(body, `"private"`) || (q != "?labelSelector=platform.example.com/db!=true" && !strings.Contains(body, `"db-creds"`)) {
			t.Errorf("listing secrets%s through the label-limited claim: %d\n%s", q, code, body)
		}
	}
	if code, body := framework.DoWith(t, vc, "PUT", base+secretPath+"db-creds", unlabel("db-creds"), nil); code != 403 || !strings.Contains(body, "only with the labels platform.example.com/db=true") {
		t.Errorf("an update taking the claim's label off: %d\n%s", code, body)
	}
	if code, body := framework.DoWith(t, vc, "PUT", base+secretPath+"private", strings.Replace(unlabel("private"), `"namespace":"default"`, `"namespace":"default","labels":{"platform.example.com/db":"true"}`, 1), nil); code != 404 {
		t.Errorf("an update labelling a secret outside the claim: %d\n%s", code, body)
	}
	if out := s.Kubectl("root:team-a", "get", "secret", "private", "-o", "jsonpath={.metadata.labels}"); strings.Contains(out, "platform.example.com") {
		t.Errorf("the secret outside the claim was labelled: %s", out)
	}
	// The provider widens the claim (no selector): team-a accepted the
	// narrow one only, so the claim is no longer granted at all.
	s.Kubectl("root:platform", "patch", "apiexport", "databases", "--type=json", "-p", `[{"op":"remove","path":"/spec/permissionClaims/1/labelSelector"}]`)
	framework.Eventually(t, 20*time.Second, "the widened claim no longer granted", func() (bool, string) {
		code, body := framework.DoWith(t, vc, "GET", base+secretPath+"db-creds", "", nil)
		return code == 403, body
	})

	// What consumers depend on cannot be deleted under them.
	if out, err := s.KubectlErr("root:platform", "", "delete", "apiexport", "databases"); err == nil || !strings.Contains(out, "is bound by 2 workspace(s) ([root:team-a root:team-b])") {
		t.Fatalf("deleting a bound export: want a refusal naming the consumers, got %v\n%s", err, out)
	}
	if out, err := s.KubectlErr("root:platform", "", "delete", "apiresourceschema", "v1.databases.platform.example.com"); err == nil || !strings.Contains(out, "is served by APIExport(s) [databases]") {
		t.Fatalf("deleting a schema the export serves: want a refusal, got %v\n%s", err, out)
	}
	// A collection delete is admitted object by object, with the
	// collection's (empty) name in its attributes: refused the same way.
	admin := framework.UserClient(t, s, "admin", "system:masters")
	for _, c := range []struct{ resource, want string }{
		{"apiexports", "APIExport databases is bound by 2 workspace(s) ([root:team-a root:team-b])"},
		{"apiresourceschemas", "APIResourceSchema v1.databases.platform.example.com is served by APIExport(s) [databases]"},
	} {
		if code, body := framework.DoWith(t, admin, "DELETE", s.URL()+"/clusters/root:platform/apis/apis.kcp.io/v1alpha1/"+c.resource, "", nil); code != 403 || !strings.Contains(body, c.want) {
			t.Fatalf("deleting root:platform's %s as a collection: %d, want 403 with %q\n%s", c.resource, code, c.want, body)
		}
	}
	framework.MustContain(t, "the export after the refused collection delete", s.Kubectl("root:platform", "get", "apiexports,apiresourceschemas", "-o", "name"),
		"apiexport.apis.kcp.io/databases", "apiresourceschema.apis.kcp.io/v1.databases.platform.example.com")
	// Nor the provider's whole workspace, which would delete the export
	// with it (the rest of this test goes on using root:platform).
	if out, err := s.KubectlErr("root", "", "delete", "workspace", "platform", "--wait=false"); err == nil ||
		!strings.Contains(out, "workspace root:platform cannot be deleted while workspaces outside it bind its APIs (APIExport databases of root:platform is bound by 2 workspace(s) ([root:team-a root:team-b]))") {
		t.Fatalf("deleting the provider's workspace: want a refusal naming the export and its consumers, got %v\n%s", err, out)
	}
	if out := s.Kubectl("root", "get", "workspace", "platform", "-o", "jsonpath={.metadata.deletionTimestamp}/{.status.phase}"); out != "/Ready" {
		t.Fatalf("the provider's workspace after the refused delete: %q, want no deletionTimestamp and Ready", out)
	}

	// A new schema version: spec.engine is pruned (refused by kubectl's
	// strict validation) until the provider switches the export to it.
	withEngine := strings.Replace(database("db9", 9), "size: 9", "size: 9, engine: postgres", 1)
	if out, err := s.KubectlErr("root:team-a", withEngine, "apply", "-f", "-"); err == nil || !strings.Contains(out, "engine") {
		t.Fatalf("spec.engine accepted before the switch: %v\n%s", err, out)
	}
	if out, err := s.KubectlErr("root:platform", databaseSchema("v2", ", engine: {type: string, description: the database engine}"), "apply", "-f", "-"); err != nil {
		t.Fatalf("publishing v2: %v\n%s", err, out)
	}
	if out, err := s.KubectlErr("root:platform", strings.Replace(databaseSchema("v1", ""), "size in GiB", "changed", 1), "apply", "-f", "-"); err == nil || !strings.Contains(out, "immutable") {
		t.Fatalf("changing a published schema was not refused as immutable: %v\n%s", err, out)
	}
	s.Kubectl("root:platform", "patch", "apiexport", "databases", "--type=merge", "-p", `{"spec":{"latestResourceSchemas":["v2.databases.platform.example.com"]}}`)
	framework.Eventually(t, 20*time.Second, "spec.engine served after the switch", func() (bool, string) {
		out, err := s.KubectlErr("root:team-a", withEngine, "apply", "-f", "-")
		return err == nil, out
	})
	framework.MustContain(t, "explain after the switch", s.Kubectl("root:team-b", "explain", "databases.spec.engine"), "the database engine")
	framework.MustContain(t, "old objects after the switch", s.Kubectl("root:team-b", "get", "database", "db1", "-n", "default", "-o", "jsonpath={.spec.size}"), "11")

	// Unbinding team-b deletes its databases (as deleting a CRD deletes
	// its objects): the API is gone there and the view no longer has them.
	s.Kubectl("root:team-b", "delete", "apibinding", "databases", "--timeout=60s")
	framework.Eventually(t, 20*time.Second, "databases gone from root:team-b and from the view", func() (bool, string) {
		out, err := s.KubectlErr("root:team-b", "", "get", "databases", "-A")
		got := viewClusters(t, inf)
		return err != nil && !strings.Contains(got, "team-b"), out + " / view: " + got
	})

	// After a restart, all of it is served again.
	stopCtrl()
	s.Stop()
	s.Start()
	framework.MustContain(t, "team-a after a restart", s.Kubectl("root:team-a", "get", "databases", "-n", "default", "-o", "name"), "db0", "db1", "db2", "db9")
	if got := listView(t, view); got != "root:team-a/db0 root:team-a/db1 root:team-a/db2 root:team-a/db9" {
		t.Fatalf("the view after a restart lists %q", got)
	}
	if out, err := s.KubectlErr("root:team-b", "", "get", "databases"); err == nil {
		t.Fatalf("root:team-b still serves databases after unbinding and a restart:\n%s", out)
	}

	// A provider deeper in a tree holds the tree's deletion back, for
	// consumers outside it only: root:org binds its child's export too, and
	// once root:outsider unbinds, deleting root:org deletes it all.
	s.CreateWorkspaces("root:org:inner")
	publishDatabases(t, s, "root:org:inner", "", "")
	framework.Eventually(t, 20*time.Second, "the inner export's Ready condition", func() (bool, string) {
		out, _ := s.KubectlErr("root:org:inner", "", "get", "apiexport", "databases", "-o", "jsonpath={.status.conditions[0].status}")
		return out == "True", out
	})
	for _, c := range []string{"root:org", "root:outsider"} {
		if out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "bind", "export", "root:org:inner:databases", "--server", s.URL()+"/clusters/"+c); err != nil {
			t.Fatalf("binding root:org:inner's export in %s: %v\n%s", c, err, out)
		}
	}
	if out, err := s.KubectlErr("root:outsider", database("kept", 3), "apply", "-f", "-"); err != nil {
		t.Fatalf("creating a database in root:outsider: %v\n%s", err, out)
	}
	if out, err := s.KubectlErr("root", "", "delete", "workspace", "org", "--wait=false"); err == nil ||
		!strings.Contains(out, "workspace root:org cannot be deleted while workspaces outside it bind its APIs (APIExport databases of root:org:inner is bound by 1 workspace(s) ([root:outsider]))") {
		t.Fatalf("deleting the tree above a bound export: want a refusal naming root:outsider only, got %v\n%s", err, out)
	}
	if out, err := s.KubectlErr("root:org", "", "delete", "workspace", "inner", "--wait=false"); err == nil || !strings.Contains(out, "([root:org root:outsider])") {
		t.Fatalf("deleting the provider's workspace itself: want a refusal naming both consumers, got %v\n%s", err, out)
	}
	if out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "ws", "delete", "inner", "--server", s.URL()+"/clusters/root:org"); err == nil ||
		!strings.Contains(out, `deleting workspace "root:org:inner"`) || !strings.Contains(out, "each must delete its APIBinding first") {
		t.Fatalf("kubectl ws delete of the provider's workspace: want the refusal, got %v\n%s", err, out)
	}
	// A collection delete is admitted item by item: refused the same way.
	if code, body := framework.DoWith(t, admin, "DELETE", s.URL()+"/clusters/root:org/apis/tenancy.kcp.io/v1alpha1/workspaces", "", nil); code != 403 ||
		!strings.Contains(body, "workspace root:org:inner cannot be deleted while workspaces outside it bind its APIs") {
		t.Fatalf("deleting root:org's workspaces as a collection: %d, want 403 naming root:org:inner\n%s", code, body)
	}
	if out := s.Kubectl("root:org", "get", "workspace", "inner", "-o", "jsonpath={.metadata.deletionTimestamp}/{.status.phase}"); out != "/Ready" {
		t.Fatalf("root:org:inner after the refused collection delete: %q, want no deletionTimestamp and Ready", out)
	}
	framework.MustContain(t, "root:outsider's database after the refusals", s.Kubectl("root:outsider", "get", "database", "kept", "-n", "default", "-o", "jsonpath={.spec.size}"), "3")
	s.Kubectl("root:outsider", "delete", "apibinding", "databases", "--timeout=60s")
	s.Kubectl("root", "delete", "workspace", "org", "--timeout=120s")
	if out, err := s.KubectlErr("root", "", "get", "workspace", "org"); err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("root:org after its deletion: %v\n%s", err, out)
	}
}

// viewClusters summarizes an informer's cache as cluster=count.
func viewClusters(t *testing.T, inf *clusterinformer.Informer[*unstructured.Unstructured]) string {
	t.Helper()
	counts := map[string]int{}
	for _, o := range inf.Indexer().List() {
		counts[string(clusterinformer.ClusterOf(o.(*unstructured.Unstructured)))]++
	}
	var out []string
	for c, n := range counts {
		out = append(out, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// listView lists databases through a view, as cluster/name.
func listView(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	d, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	list, err := d.Resource(databasesGVR).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing through the view: %v", err)
	}
	var out []string
	for _, o := range list.Items {
		out = append(out, string(clusterinformer.ClusterOf(&o))+"/"+o.GetName())
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestAPISharingAttempts: the ways a consumer or a provider could reach
// what API sharing does not give them. Each must fail and leak nothing.
func TestAPISharingAttempts(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:platform", "root:other-provider", "root:team-a", "root:team-b", "root:mallory")
	for _, p := range []string{"root:platform", "root:other-provider"} {
		publishDatabases(t, s, p, "", "")
	}
	s.Kubectl("root:platform", "create", "configmap", "provider-secret", "--from-literal=k=v")
	// team-a's admin may bind root:platform's export (and nothing there).
	// (kubectl create clusterrole allows the verb bind only on roles.)
	if out, err := s.KubectlErr("root:platform", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bind-databases}
rules: [{apiGroups: [apis.kcp.io], resources: [apiexports], resourceNames: [databases], verbs: [bind]}]
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s.Kubectl("root:platform", "create", "clusterrolebinding", "team-a-binds", "--clusterrole=bind-databases", "--user=alice")
	for _, ws := range []struct{ cluster, user string }{{"root:team-a", "alice"}, {"root:team-b", "bob"}, {"root:mallory", "mallory"}} {
		s.Kubectl("root", "create", "clusterrole", "access-"+ws.user, "--verb=access", "--resource=workspaces/content", "--resource-name="+strings.TrimPrefix(ws.cluster, "root:"))
		s.Kubectl("root", "create", "clusterrolebinding", "access-"+ws.user, "--clusterrole=access-"+ws.user, "--user="+ws.user)
		s.Kubectl(ws.cluster, "create", "clusterrolebinding", "admin-"+ws.user, "--clusterrole=cluster-admin", "--user="+ws.user)
	}
	alice, bob, mallory := framework.UserClient(t, s, "alice"), framework.UserClient(t, s, "bob"), framework.UserClient(t, s, "mallory")
	binding := func(path string) string {
		return fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIBinding","metadata":{"name":"databases"},"spec":{"reference":{"export":{"path":%q,"name":"databases"}}}}`, path)
	}
	api := func(cluster string) string {
		return s.URL() + "/clusters/" + cluster + "/apis/apis.kcp.io/v1alpha1/apibindings"
	}
	framework.Eventually(t, 20*time.Second, "alice's rights", func() (bool, string) {
		code, body := framework.DoWith(t, alice, "GET", api("root:team-a"), "", nil)
		return code == 200, body
	})
	// Binding without the verb bind (mallory), or to a workspace that does
	// not exist, is refused with the same answer.
	for _, c := range []struct{ who, path string }{{"mallory", "root:platform"}, {"mallory", "root:no-such-workspace"}} {
		code, body := framework.DoWith(t, mallory, "POST", api("root:mallory"), binding(c.path), nil)
		if code != 403 || !strings.Contains(body, `may not bind APIExport databases of workspace `+c.path) {
			t.Errorf("%s binding %s: %d %s", c.who, c.path, code, body)
		}
	}
	if code, body := framework.DoWith(t, alice, "POST", api("root:team-a"), binding("root:platform"), nil); code != 201 {
		t.Fatalf("alice binding with the bind grant: %d %s", code, body)
	}
	// The bind grant gives alice nothing else in the provider workspace.
	for _, path := range []string{"/api/v1/namespaces/default/configmaps/provider-secret", "/apis/apis.kcp.io/v1alpha1/apiresourceschemas", "/apis/apis.kcp.io/v1alpha1/apiexports/databases"} {
		if code, body := framework.DoWith(t, alice, "GET", s.URL()+"/clusters/root:platform"+path, "", nil); code != 403 || strings.Contains(body, `"data"`) {
			t.Errorf("alice reading root:platform%s: %d %s", path, code, body)
		}
	}
	// Changing the binding to another export is refused.
	patch := `{"spec":{"reference":{"export":{"path":"root:other-provider","name":"databases"}}}}`
	if code, body := doWithType(t, alice, "PATCH", api("root:team-a")+"/databases", patch, "application/merge-patch+json"); code != 422 || !strings.Contains(body, "cannot change") {
		t.Errorf("repointing a binding: %d %s", code, body)
	}
	framework.Eventually(t, 20*time.Second, "databases served in root:team-a", func() (bool, string) {
		out, err := s.KubectlErr("root:team-a", database("a1", 1), "apply", "-f", "-")
		return err == nil, out
	})
	// A forged identity in the binding's status changes nothing: objects
	// keep going to the export the binding names.
	other := s.Kubectl("root:other-provider", "get", "apiexport", "databases", "-o", "jsonpath={.status.identityHash}")
	if other == "" {
		t.Fatal("the other export has no identity")
	}
	status := fmt.Sprintf(`{"status":{"identityHash":%q}}`, other)
	doWithType(t, alice, "PATCH", api("root:team-a")+"/databases/status", status, "application/merge-patch+json")
	if out, err := s.KubectlErr("root:team-a", database("a2", 2), "apply", "-f", "-"); err != nil {
		t.Fatalf("creating a2: %v\n%s", err, out)
	}
	// mallory defines the same group and resource as a CRD of its own,
	// annotated with root:platform's identity, and writes an object.
	crd := framework.NamespacedCRD("platform.example.com", "databases", "Database", "{type: object, x-kubernetes-preserve-unknown-fields: true}")
	crd = strings.Replace(crd, "metadata: {name: databases.platform.example.com}",
		"metadata: {name: databases.platform.example.com, annotations: {apis.kcp.io/identity: '"+s.Kubectl("root:platform", "get", "apiexport", "databases", "-o", "jsonpath={.status.identityHash}")+"'}}", 1)
	if out, err := s.KubectlErr("root:mallory", crd, "apply", "-f", "-"); err != nil {
		t.Fatalf("mallory's CRD: %v\n%s", err, out)
	}
	s.WaitEstablished("root:mallory", "crd/databases.platform.example.com")
	if out, err := s.KubectlErr("root:mallory", database("injected", 1), "apply", "-f", "-"); err != nil {
		t.Fatalf("mallory's object: %v\n%s", err, out)
	}
	// team-a cannot define a CRD of the bound name over its binding.
	if out, err := s.KubectlErr("root:team-a", framework.NamespacedCRD("platform.example.com", "databases", "Database", "{type: object}"), "apply", "-f", "-"); err == nil || !strings.Contains(out, "served in this workspace by APIBinding databases") {
		t.Errorf("a CRD over a binding: %v\n%s", err, out)
	}
	// The provider's view holds team-a's objects alone; the other
	// provider's view none of them.
	framework.Eventually(t, 10*time.Second, "the view", func() (bool, string) {
		got := listView(t, viewConfig(t, s, "root:platform", "databases", "admin", "system:masters"))
		return got == "root:team-a/a1 root:team-a/a2", got
	})
	if got := listView(t, viewConfig(t, s, "root:other-provider", "databases", "admin", "system:masters")); got != "" {
		t.Errorf("the other provider's view lists %q", got)
	}
	// Consumers (without the verb content) cannot use the view, neither to
	// read each other's objects nor their own; impersonation is refused.
	view := s.URL() + "/services/apiexport/root:platform/databases/clusters/"
	for _, c := range []struct {
		client  *http.Client
		who     string
		path    string
		headers map[string]string
	}{
		{alice, "alice", "*/apis/platform.example.com/v1/databases", nil},
		{bob, "bob", "root:team-a/apis/platform.example.com/v1/databases", nil},
		{mallory, "mallory", "root:team-a/apis/platform.example.com/v1/namespaces/default/databases/a1", nil},
		{framework.UserClient(t, s, "admin", "system:masters"), "impersonating alice", "*/apis/platform.example.com/v1/databases", map[string]string{"Impersonate-User": "alice"}},
	} {
		code, body := framework.DoWith(t, c.client, "GET", view+c.path, "", c.headers)
		if code != 403 || strings.Contains(body, `"a1"`) {
			t.Errorf("%s through the view at %s: %d %s", c.who, c.path, code, body)
		}
	}
	// Paths that try to leave the view.
	admin := framework.UserClient(t, s, "admin", "system:masters")
	for _, p := range []string{
		"root:platform/../../../clusters/root:platform/api/v1/configmaps",
		"*/api/v1/configmaps",
		"root:team-a/api/v1/secrets",
		"root:mallory/apis/platform.example.com/v1/databases",
		"*/apis/apis.kcp.io/v1alpha1/apibindings",
	} {
		if code, body := framework.DoWith(t, admin, "GET", view+p, "", nil); code < 400 || strings.Contains(body, "provider-secret") || strings.Contains(body, "injected") {
			t.Errorf("the view at %s: %d %s", p, code, body)
		}
	}
}

func doWithType(t *testing.T, c *http.Client, method, url, body, contentType string) (int, string) {
	t.Helper()
	return framework.DoWith(t, c, method, url, body, map[string]string{"Content-Type": contentType})
}
