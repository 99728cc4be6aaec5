package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

func ownerRef(cm *corev1.ConfigMap) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
}

func mustConfigMap(t *testing.T, c kubernetes.Interface, name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func gone(c kubernetes.Interface, name string) (bool, string) {
	_, err := c.CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err), fmt.Sprint(err)
}

// TestGarbageCollectionPerCluster covers background, foreground and orphan
// deletion, and that owners are looked up in the dependent's cluster only.
func TestGarbageCollectionPerCluster(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:gc-a", "root:gc-b")
	a, b := s.Client("root:gc-a"), s.Client("root:gc-b")
	ctx := context.Background()

	ownerA := mustConfigMap(t, a, "owner")
	depA := mustConfigMap(t, a, "dep", ownerRef(ownerA))
	secretA, err := a.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: "dep-secret", OwnerReferences: []metav1.OwnerReference{ownerRef(ownerA)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ownerB := mustConfigMap(t, b, "owner")
	depB := mustConfigMap(t, b, "dep", ownerRef(ownerB))
	// In b, a reference to a's owner (by UID) is dangling: owners are looked
	// up in the dependent's own cluster.
	tricky := mustConfigMap(t, b, "tricky", ownerRef(ownerB), ownerRef(ownerA))
	framework.Eventually(t, 20*time.Second, "the dangling reference in b to be dropped", func() (bool, string) {
		got, err := b.CoreV1().ConfigMaps("default").Get(ctx, tricky.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(got.OwnerReferences) == 1 && got.OwnerReferences[0].UID == ownerB.UID, fmt.Sprint(got.OwnerReferences)
	})

	// Background: deleting a's owner deletes a's dependents only.
	if err := a.CoreV1().ConfigMaps("default").Delete(ctx, ownerA.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "a's dependents to be collected", func() (bool, string) {
		ok, msg := gone(a, depA.Name)
		_, err := a.CoreV1().Secrets("default").Get(ctx, secretA.Name, metav1.GetOptions{})
		return ok && apierrors.IsNotFound(err), msg
	})
	for _, n := range []string{ownerB.Name, depB.Name, tricky.Name} {
		if ok, _ := gone(b, n); ok {
			t.Errorf("deleting a's owner removed %s in b", n)
		}
	}

	// Foreground: the owner waits for its dependents.
	ownerF := mustConfigMap(t, a, "owner-fg")
	mustConfigMap(t, a, "dep-fg", ownerRef(ownerF))
	fg := metav1.DeletePropagationForeground
	if err := a.CoreV1().ConfigMaps("default").Delete(ctx, ownerF.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "foreground deletion to finish", func() (bool, string) {
		o, _ := gone(a, ownerF.Name)
		d, _ := gone(a, "dep-fg")
		return o && d, fmt.Sprintf("owner gone %v, dependent gone %v", o, d)
	})

	// Orphan: the dependent stays, without the reference.
	ownerO := mustConfigMap(t, a, "owner-orphan")
	mustConfigMap(t, a, "dep-orphan", ownerRef(ownerO))
	orphan := metav1.DeletePropagationOrphan
	if err := a.CoreV1().ConfigMaps("default").Delete(ctx, ownerO.Name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "orphan deletion to finish", func() (bool, string) {
		o, _ := gone(a, ownerO.Name)
		d, err := a.CoreV1().ConfigMaps("default").Get(ctx, "dep-orphan", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return o && len(d.OwnerReferences) == 0, fmt.Sprintf("owner gone %v, refs %v", o, d.OwnerReferences)
	})
	time.Sleep(2 * time.Second)
	if ok, _ := gone(a, "dep-orphan"); ok {
		t.Error("orphaned dependent was deleted")
	}
}
