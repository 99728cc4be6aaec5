package crds

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

var widgetsV1 = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
var widgetsV2 = schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"}

func widget(version, name string, spec map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.com/" + version, "kind": "Widget",
		"metadata": map[string]interface{}{"name": name, "namespace": "default"},
		"spec":     spec,
	}}
}

// TestPerClusterCRDs: two teams install different definitions of the same
// CRD at the same time and each sees only its own, end to end with kubectl.
func TestPerClusterCRDs(t *testing.T) {
	for _, d := range []framework.Dialect{framework.SQLite, framework.Postgres} {
		t.Run(string(d), func(t *testing.T) { testPerClusterCRDs(t, framework.DatastoreFor(t, d)) })
	}
}

func testPerClusterCRDs(t *testing.T, datastore string) {
	s := framework.StartServer(t, datastore)
	s.CreateWorkspaces("root:team-a", "root:team-b")
	const a, b = "root:team-a", "root:team-b"
	ctx := context.Background()

	// Both at once.
	errs := make(chan error, 2)
	for cluster, crd := range map[string]string{a: framework.WidgetsA, b: framework.WidgetsB} {
		go func() {
			out, err := s.KubectlErr(cluster, crd, "apply", "-f", "-")
			if err != nil {
				err = fmt.Errorf("%s: %v: %s", cluster, err, out)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{a, b} {
		s.WaitEstablished(c, "crd/widgets.example.com")
	}

	// Discovery per cluster.
	framework.MustContain(t, "api-resources in a", s.Kubectl(a, "api-resources", "--api-group=example.com"), "example.com/v1", "wd")
	outB := s.Kubectl(b, "api-resources", "--api-group=example.com")
	framework.MustContain(t, "api-resources in b", outB, "example.com/v2")
	framework.MustNotContain(t, "api-resources in b", outB, "example.com/v1 ", "wd")
	framework.MustNotContain(t, "api-resources in root", s.Kubectl("root", "api-resources", "--api-group=example.com"), "widgets")
	framework.MustContain(t, "api-versions in b", s.Kubectl(b, "api-versions"), "example.com/v2", "example.com/v1beta1")

	// Explain reads each cluster's own OpenAPI.
	framework.MustContain(t, "explain in a", s.Kubectl(a, "explain", "widget.spec.size"), "How big the widget is.")
	framework.MustContain(t, "explain in b", s.Kubectl(b, "explain", "widget.spec.color"), "The colour of the widget.", "ENUM:", "blue")
	if out, err := s.KubectlErr(a, "", "explain", "widget.spec.color"); err == nil {
		t.Fatalf("explain of b's field in a succeeded:\n%s", out)
	}

	// Validation follows each cluster's schema.
	out, err := s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: big, namespace: default}\nspec: {size: 30}\n", "apply", "-f", "-")
	if err == nil {
		t.Fatalf("a accepted size 30:\n%s", out)
	}
	framework.MustContain(t, "size 30 in a", out, "less than or equal to 10")
	out, err = s.KubectlErr(b, "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: green, namespace: default}\nspec: {color: green}\n", "apply", "-f", "-")
	if err == nil {
		t.Fatalf("b accepted green:\n%s", out)
	}
	framework.MustContain(t, "green in b", out, "Unsupported value")
	out, err = s.KubectlErr(b, "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: dark, namespace: default}\nspec: {color: red, shade: 9}\n", "apply", "-f", "-")
	if err == nil {
		t.Fatalf("b accepted a CEL violation:\n%s", out)
	}
	framework.MustContain(t, "CEL rule in b", out, "red widgets are at most shade 5")
	// a's schema does not know color: strict field validation says so.
	out, err = s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: odd, namespace: default}\nspec: {color: blue}\n", "apply", "--validate=strict", "-f", "-")
	if err == nil {
		t.Fatalf("a accepted an unknown field with --validate=strict:\n%s", out)
	}
	framework.MustContain(t, "unknown field in a", out, "unknown field")

	s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: small, namespace: default}\nspec: {size: 3}\n", "apply", "-f", "-")
	if out, err := s.KubectlErr(b, "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: blue, namespace: default}\nspec: {color: blue}\n", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	framework.MustContain(t, "printer column in a", s.Kubectl(a, "get", "wd"), "SIZE", "small")
	// diff (server-side dry run) and edit.
	out, err = s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: small, namespace: default}\nspec: {size: 4}\n", "diff", "-f", "-")
	if err == nil {
		t.Fatalf("kubectl diff found no difference:\n%s", out)
	}
	framework.MustContain(t, "kubectl diff", out, "-  size: 3", "+  size: 4")
	t.Setenv("KUBE_EDITOR", "sed -i 's/size: 3/size: 5/'")
	s.Kubectl(a, "edit", "widget", "small")
	framework.MustContain(t, "after kubectl edit", s.Kubectl(a, "get", "widget", "small", "-o", "jsonpath={.spec.size}"), "5")
	framework.MustContain(t, "category in a", s.Kubectl(a, "get", "toys"), "small")
	if out, err := s.KubectlErr(b, "", "get", "wd"); err == nil {
		t.Fatalf("b knows a's short name:\n%s", out)
	}
	// Defaulting from b's schema; the older version reads the same object.
	framework.MustContain(t, "default in b", s.Kubectl(b, "get", "widgets.v2.example.com", "blue", "-o", "jsonpath={.spec.shade}"), "3")
	framework.MustContain(t, "v1beta1 in b", s.Kubectl(b, "get", "widgets.v1beta1.example.com", "blue", "-o", "jsonpath={.apiVersion}"), "example.com/v1beta1")
	// Each cluster lists only its own objects.
	outA := s.Kubectl(a, "get", "widgets", "-o", "name")
	framework.MustContain(t, "objects in a", outA, "small")
	framework.MustNotContain(t, "objects in a", outA, "blue")

	// Server-side apply with managed fields and conflicts; status subresource.
	applied, err := s.KubectlErr(b, "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: ssa, namespace: default}\nspec: {color: blue, shade: 1}\n", "apply", "--server-side", "--field-manager=alice", "-f", "-")
	if err != nil {
		t.Fatalf("%v: %s", err, applied)
	}
	framework.MustContain(t, "managed fields", s.Kubectl(b, "get", "widget", "ssa", "-o", "yaml", "--show-managed-fields"), "manager: alice", "f:shade")
	out, err = s.KubectlErr(b, "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: ssa, namespace: default}\nspec: {color: blue, shade: 2}\n", "apply", "--server-side", "--field-manager=bob", "-f", "-")
	if err == nil {
		t.Fatalf("bob took alice's field without a conflict:\n%s", out)
	}
	framework.MustContain(t, "SSA conflict", out, "conflict")
	s.Kubectl(b, "patch", "widget", "ssa", "--subresource=status", "--type=merge", "-p", `{"status":{"ready":true}}`)
	framework.MustContain(t, "status subresource", s.Kubectl(b, "get", "widget", "ssa", "-o", "jsonpath={.status.ready}"), "true")

	// OpenAPI v3 index URLs stay in the cluster; v2 has each cluster's model.
	raw := s.Kubectl(b, "get", "--raw", "/openapi/v3")
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(raw), &index); err != nil {
		t.Fatal(err)
	}
	if u := index.Paths["apis/example.com/v2"].ServerRelativeURL; !strings.HasPrefix(u, "/clusters/root:team-b/openapi/v3/apis/example.com/v2?hash=") {
		t.Fatalf("v3 index entry for example.com/v2 in b: %q", u)
	}
	if _, ok := index.Paths["apis/example.com/v1"]; ok {
		t.Fatal("b's OpenAPI v3 index lists a's example.com/v1")
	}
	framework.MustContain(t, "OpenAPI v2 in b", s.Kubectl(b, "get", "--raw", "/openapi/v2"), `"com.example.v2.Widget"`)
	framework.MustNotContain(t, "OpenAPI v2 in root", s.Kubectl("root", "get", "--raw", "/openapi/v2"), `"com.example.v2.Widget"`)

	// A watch in a sees a's events only.
	dynA := dynamic.NewForConfigOrDie(s.Config(a))
	dynB := dynamic.NewForConfigOrDie(s.Config(b))
	w, err := dynA.Resource(widgetsV1).Namespace("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := dynB.Resource(widgetsV2).Namespace("default").Create(ctx, widget("v2", "from-b", map[string]interface{}{"color": "blue"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dynA.Resource(widgetsV1).Namespace("default").Create(ctx, widget("v1", "from-a", map[string]interface{}{"size": int64(1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	timeout := time.After(20 * time.Second)
	for !seen["from-a"] {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				u := ev.Object.(*unstructured.Unstructured)
				seen[u.GetName()] = true
				if c := u.GetAnnotations()["kcp.io/cluster"]; c != a {
					t.Fatalf("a's watch saw %s of cluster %s", u.GetName(), c)
				}
			}
		case <-timeout:
			t.Fatal("a's watch did not see from-a")
		}
	}
	if seen["from-b"] || seen["blue"] {
		t.Fatalf("a's watch saw b's objects: %v", seen)
	}

	// Across all clusters: each version lists the objects of every cluster
	// that has them, as stored, with their cluster.
	all := dynamic.NewForConfigOrDie(s.Config("*"))
	for _, gvr := range []schema.GroupVersionResource{widgetsV1, widgetsV2} {
		list, err := all.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("wildcard list of %s: %v", gvr, err)
		}
		clusters := map[string]bool{}
		for _, item := range list.Items {
			clusters[item.GetAnnotations()["kcp.io/cluster"]] = true
			if item.GetAPIVersion() != gvr.GroupVersion().String() {
				t.Fatalf("wildcard list of %s returned apiVersion %s", gvr, item.GetAPIVersion())
			}
		}
		if !clusters[a] || !clusters[b] {
			t.Fatalf("wildcard list of %s covers %v, want both teams", gvr, clusters)
		}
	}
	if _, err := all.Resource(widgetsV2).Namespace("default").Create(ctx, widget("v2", "nope", nil), metav1.CreateOptions{}); err == nil {
		t.Fatal("a create across all clusters succeeded")
	}

	// Names conflict within a cluster only; reserved groups are refused.
	crds := apiextensionsclient.NewForConfigOrDie(s.Config(a)).ApiextensionsV1().CustomResourceDefinitions()
	gadgets := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}}}},
		},
	}
	if _, err := crds.Create(ctx, gadgets, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reserved := gadgets.DeepCopy()
	reserved.Name, reserved.Spec.Group = "things.tenancy.kcp.io", "tenancy.kcp.io"
	reserved.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Singular: "thing", Kind: "Thing", ListKind: "ThingList"}
	if _, err := crds.Create(ctx, reserved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, reason := range map[string]string{"gadgets.example.com": "KindConflict", "things.tenancy.kcp.io": "ReservedGroup"} {
		framework.Eventually(t, 20*time.Second, name+" to be refused with "+reason, func() (bool, string) {
			got, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.NamesAccepted {
					return c.Status == apiextensionsv1.ConditionFalse && c.Reason == reason, fmt.Sprintf("%+v", c)
				}
			}
			return false, "no NamesAccepted condition"
		})
	}
	s.Kubectl(a, "get", "workspaces") // the system CRDs still serve tenancy.kcp.io in a

	// Deleting a's CRD deletes a's objects only.
	s.Kubectl(a, "delete", "crd", "widgets.example.com", "--timeout=60s")
	if _, err := dynA.Resource(widgetsV1).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a's widgets after deleting the CRD: %v", err)
	}
	framework.MustContain(t, "b after a's CRD is gone", s.Kubectl(b, "get", "widgets", "-o", "name"), "blue", "ssa", "from-b")

	// After a restart every cluster serves its own CRDs again.
	s.Stop()
	s.Start()
	framework.MustContain(t, "b after restart", s.Kubectl(b, "get", "widgets", "-o", "name"), "blue")
	s.Kubectl(a, "get", "namespaces")
	if out, err := s.KubectlErr(a, "", "get", "widgets"); err == nil {
		t.Fatalf("a serves widgets after restart:\n%s", out)
	}
}

// TestOpenAPIV2ProtobufWithCRD: in a workspace with a CRD, the protobuf
// OpenAPI v2 document has the media type upstream uses, so client-go's v2
// readers (kubectl explain with v2, kubectl apply's fallback) parse it.
func TestOpenAPIV2ProtobufWithCRD(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:v2")
	out, err := s.KubectlErr("root:v2", framework.NamespacedCRD("v2.example.com", "gadgets", "Gadget",
		`{type: object, properties: {spec: {type: object, description: what the gadget does, properties: {size: {type: integer}}}}}`), "apply", "-f", "-")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s.WaitEstablished("root:v2", "crd/gadgets.v2.example.com")
	framework.Eventually(t, 30*time.Second, "kubectl explain with OpenAPI v2", func() (bool, string) {
		out, err := s.KubectlErr("root:v2", "", "explain", "gadgets.spec", "--output=plaintext-openapiv2")
		return err == nil && strings.Contains(out, "what the gadget does"), out
	})
}
