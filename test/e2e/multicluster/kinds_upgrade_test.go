package multicluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestSyncerWithAnOlderManifest runs the syncer with the physical-cluster
// permissions of an older manifest (the six kinds synced before
// StatefulSets, Jobs, ... were added). It syncs what it may (the
// Deployment rolls out), leaves the kinds it may not touch alone instead
// of waiting for them forever, and a deleted StatefulSet it could not run
// still goes (its finalizer for this target is removed).
func TestSyncerWithAnOlderManifest(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:old-manifest"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pc := startPhysical(t, bins, "pc1")["pc1"]
	kubeconfig := olderManifestCredential(t, pc)
	register(t, s, admin, "pc1", "region=eu", &physical.Cluster{Kubeconfig: kubeconfig})
	waitTargetsReady(t, s, compute, "pc1")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}}
`))
	framework.Eventually(t, 60*time.Second, "default assigned", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1", a
	})
	s.Kubectl(team, "create", "deployment", "web", "--image=nginx")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "sts.yaml", `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres}]}
`))
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status deployment/web: %v\n%s", err, out)
	}
	down := downClient(t, pc)
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	if _, err := down.AppsV1().StatefulSets(ns).Get(context.Background(), "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a StatefulSet downstream with a credential that may not create it: %v", err)
	}
	if out, err := s.KubectlErr(team, "", "delete", "statefulset", "db", "--timeout=60s"); err != nil {
		t.Errorf("deleting the StatefulSet: %v\n%s", err, out)
	}
}

// olderManifestCredential is a kubeconfig of pc with the permissions the
// syncer manifest granted before issue 51.
func olderManifestCredential(t *testing.T, pc *physical.Cluster) string {
	t.Helper()
	ctx := context.Background()
	c := downClient(t, pc)
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	const ns, name = "kcp-syncer-old", "kcp-syncer"
	objs := []func() error{
		func() error {
			_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns}, Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"namespaces", "configmaps", "secrets", "serviceaccounts", "services"}, Verbs: all},
				{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: all},
				{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: all},
			}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ns},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}}}, metav1.CreateOptions{})
			return err
		},
	}
	for _, f := range objs {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	exp := int64(3600)
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(pc.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for k := range cfg.AuthInfos {
		cfg.AuthInfos[k] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	}
	path := filepath.Join(t.TempDir(), "old-syncer.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(tok.Status.Token) == "" {
		t.Fatal("empty token")
	}
	return path
}
