package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestAPINegotiation: two physical clusters serve the same CRD with
// different schemas (pc2's widgets lack spec.color) and a CRD whose field
// types conflict (gadgets' spec.size). Their syncers import both
// (--resources); kcp publishes the least common denominator of widgets and
// pc1's gadgets, reports pc2's gadgets Incompatible, and serves the result
// in a workspace placed on the location: explain shows it, a widget with
// color is refused, a widget runs on the physical cluster and its status
// comes back. A workspace's own CRD of the same name wins.
func TestAPINegotiation(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=10s")
	const compute, team, local = "root:compute", "root:apps", "root:own"
	s.CreateWorkspaces(compute, team, local)
	admin := adminIn(t, s, compute)
	kubectl := filepath.Join(framework.RepoRoot(), "bin", "kubectl")
	schemas := map[string][2]string{
		"pc1": {"size: {type: integer}, color: {type: string}", "size: {type: integer}"},
		"pc2": {"size: {type: integer}", "size: {type: string}"},
	}
	configs := map[string]string{}
	pcs := startPhysical(t, bins, "pc1", "pc2")
	for _, name := range []string{"pc1", "pc2"} {
		pc := pcs[name]
		crds := framework.NamespacedCRDWithStatus("widgets", "Widget", schemas[name][0]) + "---\n" + framework.NamespacedCRDWithStatus("gadgets", "Gadget", schemas[name][1])
		if out, err := exec.Command(kubectl, "--kubeconfig", pc.Kubeconfig, "apply", "-f", framework.WriteFile(t, name+"-crds.yaml", crds)).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		exec.Command(kubectl, "--kubeconfig", pc.Kubeconfig, "wait", "--for=condition=Established", "crd/widgets.example.com", "crd/gadgets.example.com").Run()
		region := map[string]string{"pc1": "eu", "pc2": "us"}[name]
		if name == "pc1" {
			configs[name] = register(t, s, admin, name, "region="+region, pc, "--resources", "widgets.example.com,gadgets.example.com").kubeconfig
		} else {
			// The same, named when registering (spec.resources of the SyncTarget).
			configs[name] = registerWith(t, s, admin, name, []string{"--labels", "region=" + region, "--resources", "widgets.example.com,gadgets.example.com"}, pc).kubeconfig
		}
	}

	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "sync", "pc9", "--resources", "deployments"); err == nil || !strings.Contains(out, "plural>.<group>") {
		t.Errorf("--resources with a built-in: want a refusal that explains the form, got %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "widgets negotiated from both imports, without color", func() (bool, string) {
		out := s.Kubectl(compute, "get", "negotiatedapiresource", "widgets.example.com", "-o", "jsonpath={.status.imports} {.status.dropped}", "--ignore-not-found")
		return strings.Contains(out, "pc1.widgets.example.com") && strings.Contains(out, "pc2.widgets.example.com") && strings.Contains(out, "spec.color: narrower: field removed"), out
	})
	if out := s.Kubectl(compute, "get", "negotiatedapiresource", "widgets.example.com", "-o", "yaml"); strings.Contains(out, "color") && !strings.Contains(out, "dropped") {
		t.Errorf("the negotiated widgets keep color:\n%s", out)
	}
	framework.Eventually(t, 60*time.Second, "pc2's gadgets to be reported Incompatible", func() (bool, string) {
		out := s.Kubectl(compute, "get", "apiresourceimport", "pc2.gadgets.example.com", "-o", `jsonpath={.status.conditions[?(@.type=="Compatible")].status} {.status.conditions[?(@.type=="Compatible")].message}`, "--ignore-not-found")
		return strings.HasPrefix(out, "False") && strings.Contains(out, `type "integer" against "string"`), out
	})
	if out := s.Kubectl(compute, "get", "negotiatedapiresource", "gadgets.example.com", "-o", "jsonpath={.status.imports} {.status.incompatible}"); out != `["pc1.gadgets.example.com"] ["pc2.gadgets.example.com"]` {
		t.Errorf("gadgets: %s", out)
	}

	// A syncer writes only its own imports.
	if out, err := exec.Command(kubectl, "--kubeconfig", configs["pc1"], "apply", "-f", framework.WriteFile(t, "fake-import.yaml", `apiVersion: apiresource.kcp.io/v1alpha1
kind: APIResourceImport
metadata: {name: pc2.fakes.example.com}
spec: {syncTarget: pc2, crd: {group: example.com}}
`)).CombinedOutput(); err == nil || !(strings.Contains(string(out), "may write only its own") || strings.Contains(string(out), "may reach only its own")) {
		t.Errorf("pc1's syncer wrote pc2's import: %v\n%s", err, out)
	}

	// Not served where nothing is placed on the location.
	if out, _ := s.KubectlErr(team, "", "get", "widgets"); !strings.Contains(out, "doesn't have a resource type") && !strings.Contains(out, "the server could not find") {
		t.Errorf("widgets served before a Placement: %s", out)
	}
	placement := framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", locationSelector: {matchLabels: {region: eu}}, namespaceSelector: {}}
`)
	s.Kubectl(team, "apply", "-f", placement)
	framework.Eventually(t, 30*time.Second, "explain widget.spec in the placed workspace to show the negotiated schema", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "explain", "widget.spec")
		return err == nil && strings.Contains(out, "size") && !strings.Contains(out, "color"), out
	})
	// Served through API sharing: the location's export "kubernetes" of
	// the negotiated resources that are not built in, bound by kcp.
	exported := s.Kubectl(compute, "get", "apiexport", "kubernetes", "-o", "jsonpath={.spec.latestResourceSchemas}")
	if !strings.Contains(exported, ".widgets.example.com") || !strings.Contains(exported, ".gadgets.example.com") || strings.Contains(exported, "deployments") {
		t.Errorf("the location's export: %s", exported)
	}
	framework.MustContain(t, "the Placement's binding", s.Kubectl(team, "get", "apibinding", "kubernetes.root.compute", "-o", "jsonpath={.status.phase} {.spec.reference.export.path}"), "Bound root:compute")
	framework.Eventually(t, 30*time.Second, "the namespace to be assigned", func() (bool, string) {
		ann := s.Kubectl(team, "get", "namespace", "default", "-o", "jsonpath={.metadata.annotations}")
		return strings.Contains(ann, "root:compute/pc1"), ann
	})
	if out, err := s.KubectlErr(team, "", "apply", "-f", framework.WriteFile(t, "colored.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: colored}\nspec: {size: 1, color: red}\n")); err == nil || !strings.Contains(out, "color") {
		t.Errorf("a widget with a field one cluster lacks: want a refusal naming it, got %v\n%s", err, out)
	}
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "w1.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n"))
	pc1, err := pcs["pc1"].RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	down := dynamic.NewForConfigOrDie(pc1).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).
		Namespace(syncer.DownstreamNamespace(logicalcluster.Name(team), "default"))
	ctx := context.Background()
	var w *unstructured.Unstructured
	framework.Eventually(t, 60*time.Second, "the widget on pc1", func() (bool, string) {
		w, err = down.Get(ctx, "w1", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 3 {
		t.Errorf("the widget on pc1: %v", w.Object)
	}
	unstructured.SetNestedField(w.Object, "Running", "status", "phase")
	if _, err := down.UpdateStatus(ctx, w, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the widget's status to come back", func() (bool, string) {
		out := s.Kubectl(team, "get", "widget", "w1", "-o", "jsonpath={.status.phase}")
		return out == "Running", out
	})
	if out, err := s.KubectlErr(team, "", "delete", "widget", "w1", "--timeout=60s"); err != nil {
		t.Errorf("kubectl delete widget: %v\n%s", err, out)
	}
	if _, err := down.Get(ctx, "w1", metav1.GetOptions{}); err == nil {
		t.Errorf("the widget is gone in kcp but still on pc1")
	}

	// A narrower cluster joins: the export switches to a new schema of
	// widgets, the placed workspace is served it, the old schema goes.
	oldSchemas := s.Kubectl(compute, "get", "apiresourceschemas", "-o", "name")
	narrower := importFrom(t, s, compute, "pc1.widgets.example.com", "pc0", func(versions []interface{}) {
		unstructured.RemoveNestedField(versions[0].(map[string]interface{}), "schema", "openAPIV3Schema", "properties", "spec", "properties", "size")
	})
	s.Kubectl(compute, "apply", "-f", narrower)
	framework.Eventually(t, 60*time.Second, "the placed workspace to be served widgets without size", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "explain", "widget.spec")
		return err == nil && !strings.Contains(out, "size"), out
	})
	framework.Eventually(t, 30*time.Second, "the earlier widgets schema to be deleted", func() (bool, string) {
		now := s.Kubectl(compute, "get", "apiresourceschemas", "-o", "name")
		for _, old := range strings.Fields(oldSchemas) {
			if strings.Contains(old, ".widgets.") && strings.Contains(now, old) {
				return false, now
			}
		}
		return true, now
	})
	s.Kubectl(compute, "delete", "apiresourceimport", "pc0.widgets.example.com")
	framework.Eventually(t, 60*time.Second, "size served again once the narrower cluster left", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "explain", "widget.spec")
		return err == nil && strings.Contains(out, "size"), out
	})

	// The built-in workload kinds are negotiated too, from the schemas the
	// syncers read in their clusters' OpenAPI v3.
	framework.Eventually(t, 60*time.Second, "deployments.apps negotiated from both clusters", func() (bool, string) {
		out := s.Kubectl(compute, "get", "negotiatedapiresource", "deployments.apps", "-o", `jsonpath={.status.imports} {.status.conditions[?(@.type=="Published")].status}`, "--ignore-not-found")
		return out == `["pc1.deployments.apps","pc2.deployments.apps"] True`, out
	})
	for _, name := range []string{"services.core", "ingresses.networking.k8s.io"} {
		if out := s.Kubectl(compute, "get", "negotiatedapiresource", name, "-o", "jsonpath={.status.imports}", "--ignore-not-found"); !strings.Contains(out, "pc1.") {
			t.Errorf("%s not negotiated: %q", name, out)
		}
	}
	// An older cluster that lacks a field (its import, as its syncer would
	// write it: pc1's schema without spec.minReadySeconds) narrows what a
	// placed workspace may set: refused with a message, not dropped there.
	s.Kubectl(compute, "apply", "-f", importFrom(t, s, compute, "pc1.deployments.apps", "pc0", func(versions []interface{}) {
		unstructured.RemoveNestedField(versions[0].(map[string]interface{}), "schema", "openAPIV3Schema", "properties", "spec", "properties", "minReadySeconds")
	}))
	framework.Eventually(t, 60*time.Second, "minReadySeconds dropped from the negotiated deployments", func() (bool, string) {
		out := s.Kubectl(compute, "get", "negotiatedapiresource", "deployments.apps", "-o", "jsonpath={.status.dropped}")
		return strings.Contains(out, "spec.minReadySeconds"), out
	})
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 1, minReadySeconds: 5, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: nginx}]}}}\n"
	framework.Eventually(t, 30*time.Second, "a Deployment with minReadySeconds refused in the placed workspace", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "apply", "-f", framework.WriteFile(t, "slow.yaml", deployment))
		return err != nil && strings.Contains(out, "minReadySeconds") && strings.Contains(out, "not accepted by every physical cluster"), out
	})
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "web.yaml", strings.Replace(deployment, "minReadySeconds: 5, ", "", 1)))
	// The older cluster leaves: the field is accepted again.
	s.Kubectl(compute, "delete", "apiresourceimport", "pc0.deployments.apps")
	framework.Eventually(t, 60*time.Second, "minReadySeconds accepted again", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "apply", "-f", framework.WriteFile(t, "slow.yaml", deployment))
		return err == nil, out
	})

	// A workspace's own CRD of the same name wins over negotiation.
	s.Kubectl(local, "apply", "-f", framework.WriteFile(t, "own.yaml", framework.NamespacedCRDWithStatus("widgets", "Widget", "weight: {type: string}")))
	s.WaitEstablished(local, "crd/widgets.example.com")
	s.Kubectl(local, "apply", "-f", placement)
	time.Sleep(2 * time.Second)
	if out := s.Kubectl(local, "explain", "widget.spec"); !strings.Contains(out, "weight") || strings.Contains(out, "size") {
		t.Errorf("the workspace's own CRD does not win:\n%s", out)
	}
	framework.Eventually(t, 30*time.Second, "the Placement to report the shadowed API", func() (bool, string) {
		out := s.Kubectl(local, "get", "placement", "eu", "-o", "jsonpath={.status.shadowedAPIs}")
		return out == `["widgets.example.com"]`, out
	})
	framework.Eventually(t, 30*time.Second, "the location binding to report the conflict", func() (bool, string) {
		out := s.Kubectl(local, "get", "apibinding", "kubernetes.root.compute", "-o", `jsonpath={.status.conditions[?(@.type=="Bound")].message}`)
		return strings.Contains(out, "CustomResourceDefinition widgets.example.com of its own"), out
	})
}

// importFrom writes, as the syncer of target would, a copy of the import
// name of the location with its versions changed by edit.
func importFrom(t *testing.T, s *framework.Server, location, name, target string, edit func(versions []interface{})) string {
	t.Helper()
	var imp map[string]interface{}
	if err := json.Unmarshal([]byte(s.Kubectl(location, "get", "apiresourceimport", name, "-o", "json")), &imp); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(imp, "spec", "crd", "versions")
	edit(versions)
	unstructured.SetNestedSlice(imp, versions, "spec", "crd", "versions")
	unstructured.SetNestedField(imp, target, "spec", "syncTarget")
	_, rest, _ := strings.Cut(name, ".")
	imp["metadata"] = map[string]interface{}{"name": target + "." + rest}
	delete(imp, "status")
	raw, _ := json.Marshal(imp)
	return framework.WriteFile(t, target+"-"+name+".json", string(raw))
}
