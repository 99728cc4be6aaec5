package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestNamespaceLifecyclePerCluster: objects need a live namespace in their
// own logical cluster; one of the same name elsewhere does not count.
func TestNamespaceLifecyclePerCluster(t *testing.T) {
	s := framework.StartServer(t, "")
	a, b := "root:life-a", "root:life-b"
	s.CreateWorkspaces(a, b)
	s.Kubectl(b, "create", "namespace", "only-in-b")

	out, err := s.KubectlErr(a, "", "-n", "only-in-b", "create", "configmap", "x")
	if err == nil || !strings.Contains(out, "namespace only-in-b does not exist") {
		t.Errorf("create in a namespace that exists only in %s: %v %s", b, err, out)
	}
	s.Kubectl(b, "-n", "only-in-b", "create", "configmap", "x")

	// A terminating namespace takes no new content.
	ctx := context.Background()
	ca := s.Client(a)
	if _, err := ca.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "closing", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ca.CoreV1().Namespaces().Delete(ctx, "closing", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "namespace closing to terminate", func() (bool, string) {
		ns, err := ca.CoreV1().Namespaces().Get(ctx, "closing", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ns.Status.Phase == corev1.NamespaceTerminating, string(ns.Status.Phase)
	})
	out, err = s.KubectlErr(a, "", "-n", "closing", "create", "configmap", "late")
	if err == nil || !strings.Contains(out, "is being terminated") {
		t.Errorf("create in a terminating namespace: %v %s", err, out)
	}
	if _, err := ca.CoreV1().Namespaces().Patch(ctx, "closing", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// The default namespaces stay (root's is created just after start-up).
	framework.Eventually(t, 20*time.Second, "root's default namespace", func() (bool, string) {
		_, err := s.Client("root").CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	for _, c := range []string{"root", a} {
		out, err := s.KubectlErr(c, "", "delete", "namespace", "default")
		if err == nil || !strings.Contains(out, "may not be deleted") {
			t.Errorf("deleting default in %s: %v %s", c, err, out)
		}
	}
}

// TestDefaultNamespaces: a new workspace has default, kube-system and
// kube-public, each with its default service account and kube-root-ca.crt,
// as a new cluster has; they take content and cannot be deleted; a
// Placement that selects every namespace leaves the two system ones alone.
func TestDefaultNamespaces(t *testing.T) {
	s := framework.StartServer(t, "")
	ws := "root:fresh"
	s.CreateWorkspaces(ws, "root:fresh-compute")
	ctx := context.Background()
	c := s.Client(ws)
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		framework.Eventually(t, 20*time.Second, "the defaults of namespace "+ns, func() (bool, string) {
			if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			if _, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
		out, err := s.KubectlErr(ws, "", "delete", "namespace", ns)
		if err == nil || !strings.Contains(out, "may not be deleted") {
			t.Errorf("deleting %s: %v %s", ns, err, out)
		}
	}
	// kube-root-ca.crt is kept right: a changed CA is put back (and the
	// config map's own labels stay), a deleted one comes back.
	want, err := c.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Kubectl(ws, "-n", "kube-public", "patch", "configmap", "kube-root-ca.crt", "--type=merge", "-p",
		`{"metadata":{"labels":{"mine":"yes"}},"data":{"ca.crt":"tampered","extra":"x"}}`)
	s.Kubectl(ws, "-n", "kube-system", "delete", "configmap", "kube-root-ca.crt")
	for _, ns := range []string{"kube-public", "kube-system"} {
		framework.Eventually(t, 20*time.Second, "kube-root-ca.crt of "+ns+" to be put right", func() (bool, string) {
			got, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(got.Data) == 1 && got.Data["ca.crt"] == want.Data["ca.crt"], fmt.Sprint(got.Data)
		})
	}
	if got, _ := c.CoreV1().ConfigMaps("kube-public").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); got.Labels["mine"] != "yes" {
		t.Errorf("putting the CA back dropped the config map's labels: %v", got.Labels)
	}
	// Binary data beside the right CA is taken out too.
	s.Kubectl(ws, "-n", "kube-public", "patch", "configmap", "kube-root-ca.crt", "--type=merge", "-p", `{"binaryData":{"blob":"AAE="}}`)
	framework.Eventually(t, 20*time.Second, "the binary data of kube-public's kube-root-ca.crt to be taken out", func() (bool, string) {
		got, err := c.CoreV1().ConfigMaps("kube-public").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(got.BinaryData) == 0 && len(got.Data) == 1 && got.Data["ca.crt"] == want.Data["ca.crt"], fmt.Sprint(got.Data, got.BinaryData)
	})
	if out := s.Kubectl(ws, "get", "namespaces", "-o", "name"); strings.Count(out, "namespace/") != 3 {
		t.Errorf("a new workspace should have exactly default, kube-system and kube-public:\n%s", out)
	}
	s.Kubectl(ws, "-n", "kube-system", "create", "configmap", "cluster-settings", "--from-literal=a=b")
	// Another workspace's kube-system is its own.
	if _, err := s.Client("root:fresh-compute").CoreV1().ConfigMaps("kube-system").Get(ctx, "cluster-settings", metav1.GetOptions{}); err == nil {
		t.Error("a config map of root:fresh's kube-system is visible in root:fresh-compute's")
	}

	// A Placement with an empty namespace selector places default (and a
	// namespace of the user's) but neither kube-system nor kube-public.
	s.Kubectl(ws, "create", "namespace", "app")
	// A SyncTarget whose "syncer" is this test: Ready by its own heartbeat.
	compute := "root:fresh-compute"
	if out, err := s.KubectlErr(compute, `apiVersion: workload.kcp.io/v1alpha1
kind: SyncTarget
metadata: {name: t1}
spec: {heartbeatTimeout: 10m}
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("creating a SyncTarget: %v\n%s", err, out)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	s.Kubectl(compute, "patch", "synctarget", "t1", "--subresource=status", "--type=merge", "-p",
		`{"status":{"lastHeartbeatTime":"`+now+`","conditions":[{"type":"Ready","status":"True","reason":"SyncerHeartbeat","message":"test","lastTransitionTime":"`+now+`"}]}}`)
	if out, err := s.KubectlErr(ws, `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: all}
spec:
  locationWorkspace: root:fresh-compute
  namespaceSelector: {}
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("creating a Placement: %v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "default and app to be looked at by the placement", func() (bool, string) {
		out := s.Kubectl(ws, "get", "namespaces", "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.annotations}{"\n"}{end}`)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			name, ann, _ := strings.Cut(line, "=")
			placed := strings.Contains(ann, "workload.kcp.io/")
			switch name {
			case "default", "app":
				if !placed {
					return false, line
				}
			case "kube-system", "kube-public":
				if placed {
					t.Fatalf("%s was placed: %s", name, line)
				}
			}
		}
		return true, ""
	})
}

// TestStoredDefaults: under `kcp start --store-defaults` the namespace
// defaults are written as objects (the controller caches namespaces and
// defaults, as upstream's controllers do) instead of served: every
// namespace of a new workspace and a namespace created later get their
// default service account and kube-root-ca.crt; a deleted one comes back,
// a changed CA is put back, and all of it is there after a restart.
func TestStoredDefaults(t *testing.T) {
	s := framework.StartServer(t, "", "--store-defaults")
	ws := "root:stored"
	s.CreateWorkspaces(ws)
	ctx := context.Background()
	core := s.Client(ws).CoreV1()
	haveDefaults := func(ns string) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, "the defaults of namespace "+ns, func() (bool, string) {
			if _, err := core.ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			cm, err := core.ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(cm.Data) == 1 && strings.Contains(cm.Data["ca.crt"], "BEGIN CERTIFICATE"), fmt.Sprint(cm.Data)
		})
	}
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		haveDefaults(ns)
	}
	want, err := core.ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Kubectl(ws, "create", "namespace", "app")
	haveDefaults("app")

	s.Kubectl(ws, "-n", "app", "delete", "serviceaccount", "default")
	s.Kubectl(ws, "-n", "app", "patch", "configmap", "kube-root-ca.crt", "--type=merge", "-p", `{"data":{"ca.crt":"tampered"}}`)
	s.Kubectl(ws, "-n", "default", "patch", "configmap", "kube-root-ca.crt", "--type=merge", "-p", `{"binaryData":{"blob":"AAE="}}`)
	framework.Eventually(t, 30*time.Second, "the deleted service account, the changed CA and the added binary data to be put right", func() (bool, string) {
		_, saErr := core.ServiceAccounts("app").Get(ctx, "default", metav1.GetOptions{})
		cm, err := core.ConfigMaps("app").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		withBinary, err2 := core.ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if saErr != nil || err != nil || err2 != nil {
			return false, fmt.Sprintf("service account: %v; config maps: %v, %v", saErr, err, err2)
		}
		return cm.Data["ca.crt"] == want.Data["ca.crt"] && len(withBinary.BinaryData) == 0, fmt.Sprint(cm.Data, withBinary.BinaryData)
	})

	s.Stop()
	s.Start()
	for _, ns := range []string{"default", "kube-system", "kube-public", "app"} {
		haveDefaults(ns)
	}
	// Stored, not served: SQL auditing finds each namespace's defaults
	// (when served, only one that was changed or put back has a row).
	db := openDatastore(t, s)
	for _, q := range []string{
		`SELECT count(*) FROM kcp_objects WHERE cluster = 'root:stored' AND resource = 'serviceaccounts' AND name = 'default'`,
		`SELECT count(*) FROM kcp_objects WHERE cluster = 'root:stored' AND resource = 'configmaps' AND name = 'kube-root-ca.crt'`,
	} {
		var n int
		if err := db.QueryRow(q).Scan(&n); err != nil || n != 4 {
			t.Errorf("%s: %d rows (%v), want one per namespace (4)", q, n, err)
		}
	}
}
