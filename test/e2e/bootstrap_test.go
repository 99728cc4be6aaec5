package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWorkspaceBootstrapObjects: the workspace controller writes a new
// workspace's LogicalCluster, namespaces and Ready status through the
// storage layer rather than as API requests (docs/architecture.md). A
// client must not be able to tell: the namespaces are there the moment the
// Workspace is Ready, look like a namespace the API server creates (name
// label, finalizer, phase, cluster annotation, UID, creation time), arrive
// on a wildcard watch opened before the workspace existed, take updates,
// and the LogicalCluster and Workspace read as before. Both dialects.
func TestWorkspaceBootstrapObjects(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		all := s.Client("*")
		list, err := all.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := all.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		const ws = "root:boot"
		s.CreateWorkspaces(ws)
		c := s.Client(ws)
		// No waiting: Ready means the namespaces are there.
		s.Kubectl(ws, "create", "namespace", "mine")
		mine, err := c.CoreV1().Namespaces().Get(ctx, "mine", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids := map[string]bool{string(mine.UID): true}
		for _, name := range []string{"default", "kube-system", "kube-public"} {
			ns, err := c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("namespace %s of a Ready workspace: %v", name, err)
			}
			if problem := sameShape(ns, mine); problem != "" {
				t.Errorf("namespace %s differs from one the API server creates: %s\n%+v\n%+v", name, problem, ns, mine)
			}
			if ns.Labels[corev1.LabelMetadataName] != name || ns.Annotations["kcp.io/cluster"] != ws {
				t.Errorf("namespace %s: labels %v, annotations %v", name, ns.Labels, ns.Annotations)
			}
			if ns.UID == "" || uids[string(ns.UID)] || ns.CreationTimestamp.IsZero() || ns.ResourceVersion == "" {
				t.Errorf("namespace %s: uid %q (seen: %v), created %v, resourceVersion %q", name, ns.UID, uids[string(ns.UID)], ns.CreationTimestamp, ns.ResourceVersion)
			}
			uids[string(ns.UID)] = true
		}

		// The wildcard watch opened before the workspace saw its namespaces
		// created, as the API server's own creates would show.
		want := map[string]bool{"default": true, "kube-system": true, "kube-public": true, "mine": true}
		deadline := time.After(30 * time.Second)
		for len(want) > 0 {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the watch ended; still waiting for %v", want)
				}
				ns, isNS := ev.Object.(*corev1.Namespace)
				if !isNS || ns.Annotations["kcp.io/cluster"] != ws {
					continue
				}
				if ev.Type != watch.Added {
					t.Errorf("namespace %s of %s: %s before it was added", ns.Name, ws, ev.Type)
				}
				delete(want, ns.Name)
			case <-deadline:
				t.Fatalf("a watch of namespaces across clusters did not see %v of %s created", want, ws)
			}
		}

		// They take updates like any namespace.
		s.Kubectl(ws, "label", "namespace", "default", "team=platform")
		if got, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil || got.Labels["team"] != "platform" {
			t.Errorf("label on default: %v %v", err, got.Labels)
		}

		// The LogicalCluster and the Workspace read as the API server wrote them before.
		root := dynamic.NewForConfigOrDie(s.Config("root"))
		wsObj, err := root.Resource(tenancy.WorkspacesResource).Get(ctx, "boot", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lc, err := dynamic.NewForConfigOrDie(s.Config(ws)).Resource(tenancy.LogicalClustersResource).Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if problem := checkBootstrapped(wsObj, lc, ws); problem != "" {
			t.Error(problem)
		}
		// A second workspace gets namespaces of its own.
		s.CreateWorkspaces("root:boot2")
		other, err := s.Client("root:boot2").CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if err != nil || uids[string(other.UID)] || other.Labels["team"] != "" {
			t.Errorf("default of root:boot2: %v uid %s labels %v", err, other.UID, other.Labels)
		}
	})
}

// sameShape says how ns differs from ref in what the API server sets on
// every new namespace ("" when it does not).
func sameShape(ns, ref *corev1.Namespace) string {
	keys := func(m map[string]string) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	switch {
	case !slices.Equal(keys(ns.Labels), keys(ref.Labels)):
		return fmt.Sprintf("label keys %v, want %v", keys(ns.Labels), keys(ref.Labels))
	case !slices.Equal(keys(ns.Annotations), keys(ref.Annotations)):
		return fmt.Sprintf("annotation keys %v, want %v", keys(ns.Annotations), keys(ref.Annotations))
	case !slices.Equal(ns.Spec.Finalizers, ref.Spec.Finalizers):
		return fmt.Sprintf("finalizers %v, want %v", ns.Spec.Finalizers, ref.Spec.Finalizers)
	case ns.Status.Phase != ref.Status.Phase:
		return fmt.Sprintf("phase %s, want %s", ns.Status.Phase, ref.Status.Phase)
	case ns.Kind != ref.Kind || ns.APIVersion != ref.APIVersion:
		return fmt.Sprintf("type %s %s, want %s %s", ns.APIVersion, ns.Kind, ref.APIVersion, ref.Kind)
	}
	return ""
}

func checkBootstrapped(ws, lc *unstructured.Unstructured, path string) string {
	var problems []string
	phase, _, _ := unstructured.NestedString(ws.Object, "status", "phase")
	url, _, _ := unstructured.NestedString(ws.Object, "status", "URL")
	if phase != tenancy.PhaseReady || !strings.HasSuffix(url, "/clusters/"+path) {
		problems = append(problems, fmt.Sprintf("Workspace status: phase %q URL %q", phase, url))
	}
	if conds, _, _ := unstructured.NestedSlice(ws.Object, "status", "conditions"); len(conds) != 1 ||
		conds[0].(map[string]interface{})["status"] != "True" {
		problems = append(problems, fmt.Sprintf("Workspace conditions: %v", conds))
	}
	lcPhase, _, _ := unstructured.NestedString(lc.Object, "status", "phase")
	lcURL, _, _ := unstructured.NestedString(lc.Object, "status", "URL")
	owner, _, _ := unstructured.NestedString(lc.Object, "spec", "owner", "uid")
	if lcPhase != tenancy.PhaseReady || lcURL != url || owner != string(ws.GetUID()) || lc.GetGeneration() != 1 ||
		lc.GetUID() == "" || lc.GetCreationTimestamp().Time.IsZero() || lc.GetAnnotations()["kcp.io/cluster"] != path {
		problems = append(problems, fmt.Sprintf("LogicalCluster: phase %q URL %q owner uid %q (workspace %s) generation %d uid %q created %v annotations %v",
			lcPhase, lcURL, owner, ws.GetUID(), lc.GetGeneration(), lc.GetUID(), lc.GetCreationTimestamp(), lc.GetAnnotations()))
	}
	return strings.Join(problems, "; ")
}
