package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

const clusterAnnotation = "kcp.io/cluster"

// forEachDialect runs fn against a fresh server on SQLite and on PostgreSQL.
func forEachDialect(t *testing.T, fn func(t *testing.T, s *framework.Server)) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			fn(t, s)
		})
	}
}

func createNamespace(t *testing.T, s *framework.Server, cluster, name string) {
	t.Helper()
	s.Kubectl(cluster, "create", "namespace", name)
}

// TestSameNamesAreIndependentPerCluster drives every verb with the real
// kubectl in two logical clusters holding objects of the same names.
func TestSameNamesAreIndependentPerCluster(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		a, b := "root:team-a", "root:team-b"
		s.CreateWorkspaces(a, b)
		for _, c := range []string{a, b} {
			createNamespace(t, s, c, "shop")
			s.Kubectl(c, "-n", "shop", "create", "configmap", "settings", "--from-literal=owner="+c)
		}

		// get: each cluster sees its own object.
		for _, c := range []string{a, b} {
			out := s.Kubectl(c, "-n", "shop", "get", "configmap", "settings", "-o", "jsonpath={.data.owner} {.metadata.annotations.kcp\\.io/cluster}")
			if want := c + " " + c; out != want {
				t.Errorf("cluster %s: got %q, want %q", c, out, want)
			}
		}

		// list: the root cluster has no shop namespace; team-a lists only its own.
		out := s.Kubectl("root", "get", "namespaces", "-o", "name")
		if strings.Contains(out, "namespace/shop") {
			t.Errorf("root lists a namespace of another cluster:\n%s", out)
		}
		out = s.Kubectl(a, "get", "configmaps", "-A", "-o", "jsonpath={range .items[*]}{.metadata.annotations.kcp\\.io/cluster}{\"\\n\"}{end}")
		for _, line := range strings.Fields(out) {
			if line != a {
				t.Errorf("list in %s returned an object of %s", a, line)
			}
		}

		// update via merge patch, JSON patch and server-side apply in a only.
		s.Kubectl(a, "-n", "shop", "patch", "configmap", "settings", "--type=merge", "-p", `{"data":{"merge":"yes"}}`)
		s.Kubectl(a, "-n", "shop", "patch", "configmap", "settings", "--type=json", "-p", `[{"op":"add","path":"/data/json","value":"yes"}]`)
		apply := `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
data:
  ssa: "yes"
`
		if out, err := s.KubectlErr(a, apply, "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
			t.Fatalf("server-side apply: %v\n%s", err, out)
		}
		out = s.Kubectl(a, "-n", "shop", "get", "configmap", "settings", "-o", "jsonpath={.data}")
		for _, k := range []string{"merge", "json", "ssa"} {
			if !strings.Contains(out, k) {
				t.Errorf("cluster %s lacks %q after patches: %s", a, k, out)
			}
		}
		out = s.Kubectl(b, "-n", "shop", "get", "configmap", "settings", "-o", "jsonpath={.data}")
		if out != `{"owner":"root:team-b"}` {
			t.Errorf("patches in %s changed %s: %s", a, b, out)
		}

		// replace (PUT) with kubectl edit-like flow: get, change, replace.
		cm, err := s.Client(a).CoreV1().ConfigMaps("shop").Get(context.Background(), "settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["replaced"] = "yes"
		if _, err := s.Client(a).CoreV1().ConfigMaps("shop").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}

		// delete in a leaves b.
		s.Kubectl(a, "-n", "shop", "delete", "configmap", "settings")
		if out, err := s.KubectlErr(a, "", "-n", "shop", "get", "configmap", "settings"); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("deleted configmap still readable in %s: %v %s", a, err, out)
		}
		out = s.Kubectl(b, "-n", "shop", "get", "configmap", "settings", "-o", "jsonpath={.data.owner}")
		if out != b {
			t.Errorf("delete in %s removed %s's object: %q", a, b, out)
		}

		// A client cannot move an object into another cluster with the annotation.
		forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "shop",
			Annotations: map[string]string{clusterAnnotation: b}}}
		created, err := s.Client(a).CoreV1().ConfigMaps("shop").Create(context.Background(), forged, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := created.Annotations[clusterAnnotation]; got != a {
			t.Errorf("forged annotation kept: %q", got)
		}
		if _, err := s.Client(b).CoreV1().ConfigMaps("shop").Get(context.Background(), "forged", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("forged object visible in %s: %v", b, err)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, clusterAnnotation, b)
		// Changing it later is refused, not accepted and silently overwritten.
		if _, err := s.Client(a).CoreV1().ConfigMaps("shop").Patch(context.Background(), "forged", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); !apierrors.IsBadRequest(err) {
			t.Errorf("patching %s to %s: got %v, want 400 Bad Request", clusterAnnotation, b, err)
		}
		got, err := s.Client(a).CoreV1().ConfigMaps("shop").Get(context.Background(), "forged", metav1.GetOptions{})
		if err != nil || got.Annotations[clusterAnnotation] != a {
			t.Errorf("after the refused patch: %v, annotation %q", err, got.Annotations[clusterAnnotation])
		}
	})
}

// TestWatchIsConfinedToItsCluster watches configmaps in one cluster while
// both clusters are written.
func TestWatchIsConfinedToItsCluster(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		a, b := "root:watch-a", "root:watch-b"
		s.CreateWorkspaces(a, b)
		for _, c := range []string{a, b} {
			createNamespace(t, s, c, "w")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		w, err := s.Client(a).CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		all, err := s.Client("*").CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer all.Stop()
		for i := 0; i < 3; i++ {
			for _, c := range []string{b, a} {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "w"}}
				if _, err := s.Client(c).CoreV1().ConfigMaps("w").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.Client(a).CoreV1().ConfigMaps("w").Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for len(seen) < 4 {
			// (kube-root-ca.crt comes and goes with namespaces; count our own.)
			select {
			case ev := <-w.ResultChan():
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					t.Fatalf("unexpected event %v", ev)
				}
				if got := cm.Annotations[clusterAnnotation]; got != a {
					t.Fatalf("watch in %s received an event of %s", a, got)
				}
				if strings.HasPrefix(cm.Name, "cm-") {
					seen[string(ev.Type)+"/"+cm.Name] = true
				}
			case <-ctx.Done():
				t.Fatalf("watch in %s saw only %v", a, seen)
			}
		}
		if !seen[string(watch.Deleted)+"/cm-0"] {
			t.Errorf("no delete event: %v", seen)
		}
		// The wildcard watch sees both clusters.
		clusters := map[string]int{}
		for clusters[a] < 3 || clusters[b] < 3 {
			select {
			case ev := <-all.ResultChan():
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok && cm.Namespace == "w" {
					clusters[cm.Annotations[clusterAnnotation]]++
				}
			case <-ctx.Done():
				t.Fatalf("wildcard watch saw %v", clusters)
			}
		}
	})
}

// TestRestartKeepsData stops the server and starts it on the same datastore.
func TestRestartKeepsData(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		s.CreateWorkspaces("root:keep")
		createNamespace(t, s, "root:keep", "data")
		s.Kubectl("root:keep", "-n", "data", "create", "secret", "generic", "token", "--from-literal=v=42")
		s.Stop()
		s.Start()
		out := s.Kubectl("root:keep", "-n", "data", "get", "secret", "token", "-o", "jsonpath={.data.v}")
		if out != "NDI=" {
			t.Fatalf("after restart: %q", out)
		}
	})
}

// TestNamespaceDeletion deletes a namespace with content in one cluster; the
// namespace of the same name in another cluster keeps its content.
func TestNamespaceDeletion(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		a, b := "root:ns-a", "root:ns-b"
		s.CreateWorkspaces(a, b)
		for _, c := range []string{a, b} {
			createNamespace(t, s, c, "doomed")
			s.Kubectl(c, "-n", "doomed", "create", "configmap", "x", "--from-literal=a=b")
			s.Kubectl(c, "-n", "doomed", "create", "serviceaccount", "robot")
		}
		s.Kubectl(a, "delete", "namespace", "doomed", "--wait=true", "--timeout=60s")
		if out, err := s.KubectlErr(a, "", "get", "namespace", "doomed"); err == nil {
			t.Fatalf("namespace still there: %s", out)
		}
		if _, err := s.Client(a).CoreV1().ConfigMaps("doomed").Get(context.Background(), "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("content of deleted namespace remains: %v", err)
		}
		out := s.Kubectl(b, "-n", "doomed", "get", "configmap,serviceaccount", "-o", "name")
		if !strings.Contains(out, "configmap/x") || !strings.Contains(out, "serviceaccount/robot") {
			t.Errorf("deletion in %s removed content of %s:\n%s", a, b, out)
		}
	})
}

// TestDiscoveryAndOpenAPIPerCluster uses kubectl's discovery and explain in a
// non-root cluster.
func TestDiscoveryAndOpenAPIPerCluster(t *testing.T) {
	s := framework.StartServer(t, "")
	c := "root:disco"
	s.CreateWorkspaces(c)
	out := s.Kubectl(c, "api-resources", "-o", "name")
	for _, r := range []string{"configmaps", "namespaces", "secrets", "leases.coordination.k8s.io", "roles.rbac.authorization.k8s.io", "customresourcedefinitions.apiextensions.k8s.io"} {
		if !strings.Contains(out, r) {
			t.Errorf("api-resources in %s lacks %s", c, r)
		}
	}
	// Built-in kinds kcp does not run are listed only to explain
	// themselves (docs/multicluster.md, "Kinds kcp does not run"): nothing
	// of them can be deleted, so nothing that deletes what discovery lists
	// sees them. Cluster-scoped ones are not listed at all.
	deletable := s.Kubectl(c, "api-resources", "--verbs=delete", "-o", "name")
	for _, r := range []string{"replicationcontrollers", "podtemplates", "nodes", "persistentvolumes"} {
		if strings.Contains("\n"+deletable, "\n"+r+"\n") {
			t.Errorf("api-resources --verbs=delete in %s lists %s, which kcp does not serve", c, r)
		}
	}
	for _, r := range []string{"nodes", "persistentvolumes"} {
		if strings.Contains(out, "\n"+r+"\n") {
			t.Errorf("api-resources in %s lists %s", c, r)
		}
	}
	// The workload APIs a syncer runs on physical clusters (issues 14, 51).
	for _, r := range []string{"deployments.apps", "services", "ingresses.networking.k8s.io", "statefulsets.apps", "daemonsets.apps",
		"jobs.batch", "cronjobs.batch", "poddisruptionbudgets.policy", "horizontalpodautoscalers.autoscaling",
		"networkpolicies.networking.k8s.io", "persistentvolumeclaims", "pods"} {
		if !strings.Contains(out, "\n"+r+"\n") {
			t.Errorf("api-resources in %s lacks %s", c, r)
		}
	}
	out = s.Kubectl(c, "explain", "configmap.data")
	if !strings.Contains(out, "FIELD: data") {
		t.Errorf("explain in %s: %s", c, out)
	}
	v := s.Kubectl(c, "version", "-o", "json")
	var ver struct {
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(v), &ver); err != nil || !strings.HasPrefix(ver.ServerVersion.GitVersion, "v1.37") {
		t.Errorf("server version: %v %s", err, v)
	}
}
