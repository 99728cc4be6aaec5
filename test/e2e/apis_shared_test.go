package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestAPISharingOneHandler: the consumers of an export are served by one
// handler (issue 56), which must keep them apart as separate handlers did.
// Two consumers hold objects of the same names; neither gets, lists,
// watches, updates or deletes the other's, and a create of a name the
// other uses does not conflict. Then the export switches to a new schema
// version and both consumers store and read its new field. A consumer's
// own CRD is served beside the binding as before.
func TestAPISharingOneHandler(t *testing.T) {
	for _, d := range []framework.Dialect{framework.SQLite, framework.Postgres} {
		t.Run(string(d), func(t *testing.T) { testAPISharingOneHandler(t, framework.DatastoreFor(t, d)) })
	}
}

func testAPISharingOneHandler(t *testing.T, datastore string) {
	s := framework.StartServer(t, datastore)
	s.CreateWorkspaces("root:platform", "root:team-a", "root:team-b")
	ctx := context.Background()
	publishDatabases(t, s, "root:platform", "", "")
	framework.Eventually(t, 20*time.Second, "the export's Ready condition", func() (bool, string) {
		out, _ := s.KubectlErr("root:platform", "", "get", "apiexport", "databases", "-o", "jsonpath={.status.conditions[0].status}")
		return out == "True", out
	})
	clients := map[string]dynamic.ResourceInterface{}
	for _, c := range []string{"root:team-a", "root:team-b"} {
		if out, err := s.KubectlPlugin(s.Kubeconfig, "kcp", "bind", "export", "root:platform:databases", "--server", s.URL()+"/clusters/"+c); err != nil {
			t.Fatalf("binding in %s: %v\n%s", c, err, out)
		}
		d, err := dynamic.NewForConfig(s.Config(c))
		if err != nil {
			t.Fatal(err)
		}
		clients[c] = d.Resource(databasesGVR).Namespace("default")
	}
	a, b := clients["root:team-a"], clients["root:team-b"]
	size := func(u *unstructured.Unstructured) int64 {
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
		return n
	}
	obj := func(name string, n int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "platform.example.com/v1", "kind": "Database",
			"metadata": map[string]interface{}{"name": name, "namespace": "default"},
			"spec":     map[string]interface{}{"size": n},
		}}
	}
	// team-b first: "same" (size 2) and "only-b".
	framework.Eventually(t, 20*time.Second, "databases served in root:team-b", func() (bool, string) {
		_, err := b.Create(ctx, obj("same", 2), metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if _, err := b.Create(ctx, obj("only-b", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "databases served in root:team-a", func() (bool, string) {
		_, err := a.List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// team-a watches from "now": the watch starts with the objects that
	// exist (team-a has none), then team-b writes, then team-a creates
	// "same". The first event team-a sees must be its own create: team-b's
	// objects and write come earlier in the datastore's order.
	w, err := a.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := b.Patch(ctx, "only-b", "application/merge-patch+json", []byte(`{"spec":{"size":30}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := a.Create(ctx, obj("same", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating team-a's database of the name team-b uses: %v (a shared handler must not see team-b's)", err)
	}
	if c := clusterinformer.ClusterOf(created); c != "root:team-a" {
		t.Errorf("team-a's database is annotated with cluster %q", c)
	}
	select {
	case ev := <-w.ResultChan():
		u, _ := ev.Object.(*unstructured.Unstructured)
		if ev.Type != watch.Added || u == nil || u.GetName() != "same" || size(u) != 1 || clusterinformer.ClusterOf(u) != "root:team-a" {
			t.Fatalf("team-a's watch delivered %s %v first, want its own create of same (size 1)", ev.Type, ev.Object)
		}
	case <-time.After(time.Minute):
		t.Fatal("team-a's watch delivered nothing after its own create")
	}

	// Reads and writes by name stay in each consumer.
	if _, err := a.Get(ctx, "only-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("team-a getting team-b's only-b: %v, want NotFound", err)
	}
	if _, err := a.Patch(ctx, "only-b", "application/merge-patch+json", []byte(`{"spec":{"size":99}}`), metav1.PatchOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("team-a patching team-b's only-b: %v, want NotFound", err)
	}
	if err := a.Delete(ctx, "only-b", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("team-a deleting team-b's only-b: %v, want NotFound", err)
	}
	names := func(r dynamic.ResourceInterface) string {
		list, err := r.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range list.Items {
			out = append(out, fmt.Sprintf("%s=%d", o.GetName(), size(&o)))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	if got := names(a); got != "same=1" {
		t.Errorf("team-a lists %q, want its own same=1 only", got)
	}
	if got := names(b); got != "only-b=30 same=2" {
		t.Errorf("team-b lists %q, want only-b=30 same=2 (untouched by team-a)", got)
	}
	if out := s.Kubectl("root:team-a", "get", "databases", "-A", "-o", "name"); strings.TrimSpace(out) != "database.platform.example.com/same" {
		t.Errorf("team-a's kubectl get databases -A: %q", out)
	}
	// Deleting in team-a leaves team-b's object of that name.
	if err := a.Delete(ctx, "same", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, "same", metav1.GetOptions{}); err != nil || size(got) != 2 {
		t.Errorf("team-b's same after team-a deleted its own: %v %v", err, got)
	}

	// A CRD of team-a's own is served beside the binding.
	if out, err := s.KubectlErr("root:team-a", `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.org}
spec:
  group: example.org
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("creating team-a's own CRD: %v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "team-a's own widgets served", func() (bool, string) {
		out, err := s.KubectlErr("root:team-a", "apiVersion: example.org/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\ncolor: blue\n", "apply", "-f", "-")
		return err == nil, out
	})
	framework.MustContain(t, "team-a's widget", s.Kubectl("root:team-a", "get", "widget", "w1", "-n", "default", "-o", "jsonpath={.color}"), "blue")
	if got := names(a); got != "" {
		t.Errorf("team-a's databases after its own CRD: %q, want none", got)
	}

	// The export switches to a schema with spec.engine: both consumers
	// store it (it was pruned before) and read it back.
	if out, err := s.KubectlErr("root:platform", databaseSchema("v2", ", engine: {type: string}"), "apply", "-f", "-"); err != nil {
		t.Fatalf("publishing v2: %v\n%s", err, out)
	}
	withEngine := func(name string) *unstructured.Unstructured {
		u := obj(name, 5)
		_ = unstructured.SetNestedField(u.Object, "postgres", "spec", "engine")
		return u
	}
	if u, err := a.Create(ctx, withEngine("before-switch"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	} else if e, found, _ := unstructured.NestedString(u.Object, "spec", "engine"); found {
		t.Fatalf("spec.engine stored before the switch (%q): the test would not show the switch", e)
	}
	s.Kubectl("root:platform", "patch", "apiexport", "databases", "--type=merge", "-p", `{"spec":{"latestResourceSchemas":["v2.databases.platform.example.com"]}}`)
	for c, r := range clients {
		framework.Eventually(t, 30*time.Second, "spec.engine stored in "+c, func() (bool, string) {
			name := fmt.Sprintf("engine-%d", time.Now().UnixNano())
			if _, err := r.Create(ctx, withEngine(name), metav1.CreateOptions{}); err != nil {
				return false, err.Error()
			}
			got, err := r.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			e, _, _ := unstructured.NestedString(got.Object, "spec", "engine")
			return e == "postgres", fmt.Sprintf("spec.engine read back as %q", e)
		})
	}
	// The objects from before the switch are still each consumer's own.
	if got, err := b.Get(ctx, "only-b", metav1.GetOptions{}); err != nil || size(got) != 30 {
		t.Errorf("team-b's only-b after the switch: %v %v", err, got)
	}
	if _, err := a.Get(ctx, "only-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("team-a getting team-b's only-b after the switch: %v, want NotFound", err)
	}
}
