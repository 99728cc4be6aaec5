package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/tenancy"
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

// TestGarbageCollectionOfWorkspaces: Workspaces are collected as dependents
// and wait for theirs in foreground deletion (the collector hears of them
// through the workspace controller's informer), and a workspace's
// LogicalCluster counts as an existing owner (the collector knows the kind
// without watching it) while a reference to it with another UID dangles.
func TestGarbageCollectionOfWorkspaces(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:gcw", "root:gcw:inner")
	c := s.Client("root:gcw")
	dyn, err := dynamic.NewForConfig(s.Config("root:gcw"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	workspaces := dyn.Resource(tenancy.WorkspacesResource)
	newWorkspace := func(name string, owners ...metav1.OwnerReference) *unstructured.Unstructured {
		t.Helper()
		ws := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "Workspace",
			"metadata": map[string]interface{}{"name": name}, "spec": map[string]interface{}{},
		}}
		ws.SetOwnerReferences(owners)
		got, err := workspaces.Create(ctx, ws, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	workspaceGone := func(name string) func() (bool, string) {
		return func() (bool, string) {
			_, err := workspaces.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		}
	}
	wsRef := func(ws *unstructured.Unstructured) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: tenancy.Group + "/" + tenancy.Version, Kind: "Workspace", Name: ws.GetName(), UID: ws.GetUID()}
	}

	// A Workspace owned by a config map goes with it.
	owner := mustConfigMap(t, c, "ws-owner")
	newWorkspace("owned", ownerRef(owner))
	if err := c.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the owned workspace to be collected", workspaceGone("owned"))

	// A config map owned by a Workspace goes with it; in foreground, the
	// Workspace waits for it.
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		name := "owner-" + strings.ToLower(string(policy))
		ws := newWorkspace(name)
		mustConfigMap(t, c, "dep-of-"+name, wsRef(ws))
		framework.Eventually(t, 60*time.Second, "workspace "+name+" to be ready", func() (bool, string) {
			got, err := workspaces.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
			return phase == tenancy.PhaseReady, phase
		})
		if err := workspaces.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "the dependent of workspace "+name+" to be collected", func() (bool, string) {
			return gone(c, "dep-of-"+name)
		})
		framework.Eventually(t, 60*time.Second, "workspace "+name+" to go", workspaceGone(name))
	}

	// Owned by the LogicalCluster of its own workspace: kept; by an object
	// of that name with another UID: collected.
	inner := s.Client("root:gcw:inner")
	innerDyn, err := dynamic.NewForConfig(s.Config("root:gcw:inner"))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := innerDyn.Resource(tenancy.LogicalClustersResource).Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lcRef := metav1.OwnerReference{APIVersion: tenancy.Group + "/" + tenancy.Version, Kind: "LogicalCluster", Name: lc.GetName(), UID: lc.GetUID()}
	mustConfigMap(t, inner, "owned-by-cluster", lcRef)
	lcRef.UID = "00000000-0000-0000-0000-000000000000"
	mustConfigMap(t, inner, "owned-by-another", lcRef)
	framework.Eventually(t, 60*time.Second, "the dependent of a LogicalCluster that is not there to be collected", func() (bool, string) {
		return gone(inner, "owned-by-another")
	})
	if ok, msg := gone(inner, "owned-by-cluster"); ok {
		t.Errorf("a config map owned by its workspace's LogicalCluster was collected: %s", msg)
	}
}

// TestGarbageCollectionAfterRestart: dependents that exist when the
// collector starts are found by its first list, which for service
// accounts, config maps and ClusterRoleBindings reads the stored rows
// (their served defaults never have owners): a config map, a service
// account and a ClusterRoleBinding with owners, stored before a restart,
// are collected when their owners go after it, and so is a dependent of a
// served default (the service account "default").
func TestGarbageCollectionAfterRestart(t *testing.T) {
	s := framework.StartServer(t, "")
	const ws = "root:gc-restart"
	s.CreateWorkspaces(ws)
	c := s.Client(ws)
	ctx := context.Background()
	owner := mustConfigMap(t, c, "owner")
	mustConfigMap(t, c, "dep", ownerRef(owner))
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: "dep-sa", OwnerReferences: []metav1.OwnerReference{ownerRef(owner)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "owner-role"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dep-crb",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID}}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustConfigMap(t, c, "dep-of-default", metav1.OwnerReference{APIVersion: "v1", Kind: "ServiceAccount", Name: sa.Name, UID: sa.UID})

	s.Stop()
	s.Start()
	c = s.Client(ws)
	if err := c.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().ServiceAccounts("default").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the dependents stored before the restart to be collected", func() (bool, string) {
		var left []string
		if ok, _ := gone(c, "dep"); !ok {
			left = append(left, "config map dep")
		}
		if ok, _ := gone(c, "dep-of-default"); !ok {
			left = append(left, "config map dep-of-default (owned by the served service account)")
		}
		if _, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "dep-sa", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "service account dep-sa")
		}
		if _, err := c.RbacV1().ClusterRoleBindings().Get(ctx, "dep-crb", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "ClusterRoleBinding dep-crb")
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}
