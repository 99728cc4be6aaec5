package multicluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// argoCD is the Argo CD release whose manifests/install.yaml is applied
// unchanged; it comes from the Go module proxy (the module's zip holds the
// repository's manifests).
const argoCD = "github.com/argoproj/argo-cd/v3@v3.6.1"

// TestArgoCDInstallsUnchanged applies Argo CD's public install manifest,
// unchanged, in a placed workspace, as its README says (kubectl create
// namespace argocd; kubectl apply -n argocd --server-side -f install.yaml):
// every object is accepted; every namespaced object reaches the physical
// cluster, in the namespace mapped to argocd; its CRDs, ClusterRoles and
// ClusterRoleBindings stay in the workspace and never reach the shared
// physical cluster; the Deployments and the StatefulSet run there and
// their status comes back, so `kubectl rollout status` completes in kcp;
// the workspace then serves Argo CD's own API.
func TestArgoCDInstallsUnchanged(t *testing.T) {
	manifest, err := os.ReadFile(filepath.Join(moduleDir(t, argoCD, "manifests"), "install.yaml"))
	if err != nil {
		t.Fatalf("%s has no manifests/install.yaml: %v", argoCD, err)
	}
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:gitops"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}}
`))
	s.Kubectl(team, "create", "namespace", "argocd")
	framework.Eventually(t, 60*time.Second, "namespace argocd placed", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "argocd", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1", a
	})

	out, err := s.KubectlErr(team, "", "apply", "-n", "argocd", "--server-side", "-f", framework.WriteFile(t, "install.yaml", string(manifest)))
	if err != nil {
		t.Fatalf("kubectl apply of Argo CD's install.yaml: %v\n%s", err, out)
	}
	if n := strings.Count(out, "serverside-applied"); n != strings.Count("\n"+string(manifest), "\nkind: ") {
		t.Errorf("%d objects applied of %d:\n%s", n, strings.Count("\n"+string(manifest), "\nkind: "), out)
	}

	ctx := context.Background()
	down := downClient(t, pcs["pc1"])
	dyn := downDynamic(t, pcs["pc1"])
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "argocd")
	deployments := []string{"argocd-applicationset-controller", "argocd-dex-server", "argocd-notifications-controller", "argocd-redis", "argocd-repo-server", "argocd-server"}
	framework.Eventually(t, 120*time.Second, "Argo CD's namespaced objects downstream", func() (bool, string) {
		for _, c := range []struct {
			gvr  schema.GroupVersionResource
			name string
		}{
			{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, "argocd-application-controller"},
			{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "argocd-server"},
			{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "argocd-cm"},
			{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "argocd-secret"},
			{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, "argocd-server"},
			{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, "argocd-server"},
			{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, "argocd-server"},
			{schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}, "argocd-server-network-policy"},
		} {
			if _, err := dyn.Resource(c.gvr).Namespace(ns).Get(ctx, c.name, metav1.GetOptions{}); err != nil {
				return false, fmt.Sprintf("%s %s: %v", c.gvr.Resource, c.name, err)
			}
		}
		for _, d := range deployments {
			if _, err := down.AppsV1().Deployments(ns).Get(ctx, d, metav1.GetOptions{}); err != nil {
				return false, fmt.Sprintf("deployment %s: %v", d, err)
			}
		}
		return true, ""
	})
	// Status comes back: rollout status completes in the workspace.
	for _, d := range deployments {
		out, err := s.KubectlErr(team, "", "-n", "argocd", "rollout", "status", "deployment/"+d, "--timeout=120s")
		if err != nil {
			t.Errorf("rollout status deployment/%s: %v\n%s", d, err, out)
		}
	}
	out, err = s.KubectlErr(team, "", "-n", "argocd", "rollout", "status", "statefulset/argocd-application-controller", "--timeout=120s")
	if err != nil {
		t.Errorf("rollout status statefulset/argocd-application-controller: %v\n%s", err, out)
	}

	// Cluster-scoped objects stay in the workspace.
	for _, c := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{
		{schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "applications.argoproj.io"},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "argocd-server"},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, "argocd-server"},
	} {
		if _, err := dyn.Resource(c.gvr).Get(ctx, c.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the shared physical cluster received the tenant's %s %s: %v", c.gvr.Resource, c.name, err)
		}
	}
	s.WaitEstablished(team, "crd", "applications.argoproj.io")
	// The workspace serves Argo CD's API.
	s.Kubectl(team, "apply", "-n", "argocd", "-f", framework.WriteFile(t, "app.yaml", `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: guestbook}
spec:
  project: default
  source: {repoURL: "https://github.com/argoproj/argocd-example-apps.git", targetRevision: HEAD, path: guestbook}
  destination: {server: "https://kubernetes.default.svc", namespace: default}
`))
	framework.MustContain(t, "kubectl get applications", s.Kubectl(team, "-n", "argocd", "get", "applications"), "guestbook")
}
