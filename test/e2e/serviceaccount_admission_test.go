package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestPodServiceAccountsAreLookedUpInTheirWorkspace: a Pod (kubectl run)
// in a new namespace of a workspace gets the namespace's default service
// account, as on a cluster; a Pod naming a service account is accepted only
// if that account exists in its own workspace: one of the same namespace
// and name in another workspace does not count, and one missing is refused
// with upstream's message.
func TestPodServiceAccountsAreLookedUpInTheirWorkspace(t *testing.T) {
	s := framework.StartServer(t, "")
	const a, b = "root:sa-a", "root:sa-b"
	s.CreateWorkspaces(a, b)
	ctx := context.Background()
	for _, ws := range []string{a, b} {
		s.Kubectl(ws, "create", "namespace", "fresh")
	}
	pod := func(name, sa string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	// The default service account of a new namespace (served, not stored).
	created, err := s.Client(a).CoreV1().Pods("fresh").Create(ctx, pod("p1", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a pod in a new namespace: %v", err)
	}
	if created.Spec.ServiceAccountName != "default" {
		t.Errorf("spec.serviceAccountName %q, want default", created.Spec.ServiceAccountName)
	}
	// A service account of another workspace does not count.
	if _, err := s.Client(a).CoreV1().ServiceAccounts("fresh").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Client(b).CoreV1().Pods("fresh").Create(ctx, pod("p2", "builder"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `error looking up service account fresh/builder: serviceaccount "builder" not found`) {
		t.Errorf("a pod naming another workspace's service account: %v", err)
	}
	if _, err := s.Client(a).CoreV1().Pods("fresh").Create(ctx, pod("p2", "builder"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a pod naming its own workspace's service account: %v", err)
	}
	// kubectl run, as a user would.
	out := s.Kubectl(b, "-n", "fresh", "run", "shell", "--image=busybox")
	framework.MustContain(t, "kubectl run", out, "pod/shell created")
}
