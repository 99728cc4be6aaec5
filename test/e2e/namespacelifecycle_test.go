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
