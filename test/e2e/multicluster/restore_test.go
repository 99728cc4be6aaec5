package multicluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestRestorePlacedWorkspace: a placed workspace damaged by a bad deploy
// (new image, scaled up, a ConfigMap deleted, a Deployment added) and
// restored with `kcp restore` to the moment before: the physical cluster
// converges to the restored objects, as to any change.
func TestRestorePlacedWorkspace(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--change-history")
	const compute, team = "root:compute", "root:shop"
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
	framework.Eventually(t, 60*time.Second, "the namespace to be assigned", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a != "", a
	})
	s.Kubectl(team, "create", "configmap", "settings", "--from-literal=mode=safe")
	s.Kubectl(team, "create", "deployment", "web", "--image=nginx:1.0", "--replicas=2")
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	down := downClient(t, pcs["pc1"])
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()
	framework.Eventually(t, 60*time.Second, "the ConfigMap downstream", func() (bool, string) {
		_, err := down.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
		return err == nil, "settings: " + fmt.Sprint(err)
	})
	time.Sleep(1100 * time.Millisecond)
	point := time.Now().UTC().Format(time.RFC3339)
	time.Sleep(1100 * time.Millisecond)

	// The bad deploy.
	s.Kubectl(team, "set", "image", "deployment/web", "nginx=nginx:broken")
	s.Kubectl(team, "scale", "deployment/web", "--replicas=5")
	s.Kubectl(team, "delete", "configmap", "settings")
	s.Kubectl(team, "create", "deployment", "extra", "--image=nginx:1.0")
	web := func() string {
		d, err := down.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%s x%d", d.Spec.Template.Spec.Containers[0].Image, *d.Spec.Replicas)
	}
	framework.Eventually(t, 60*time.Second, "the bad deploy downstream", func() (bool, string) {
		_, err := down.AppsV1().Deployments(ns).Get(ctx, "extra", metav1.GetOptions{})
		return web() == "nginx:broken x5" && err == nil, web() + fmt.Sprintf(", extra: %v", err)
	})

	kcp, _ := framework.Binaries(t)
	out, err := exec.Command(kcp, "restore", team, "--to", point, "--kubeconfig", s.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("kcp restore: %v\n%s\n%s", err, out, s.LogTail(30))
	}
	framework.MustContain(t, "kcp restore's output", string(out), "Succeeded", "restored root:shop")
	framework.Eventually(t, 90*time.Second, "the physical cluster as before the bad deploy", func() (bool, string) {
		_, cmErr := down.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
		_, extraErr := down.AppsV1().Deployments(ns).Get(ctx, "extra", metav1.GetOptions{})
		ok := web() == "nginx:1.0 x2" && cmErr == nil && apierrors.IsNotFound(extraErr)
		return ok, fmt.Sprintf("web %s, settings %v, extra %v", web(), cmErr, extraErr)
	})
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("the restored Deployment does not roll out: %v\n%s", err, out)
	}
	// The status follows the physical cluster, where the old pods of the
	// scaled-down rollout can still count as available for a moment after
	// rollout status returns.
	framework.Eventually(t, 30*time.Second, "the restored Deployment in kcp: image nginx:1.0 with 2 available", func() (bool, string) {
		got := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.status.availableReplicas}")
		return got == "nginx:1.0 2", got
	})
	if got, err := s.KubectlErr(team, "", "get", "deployment", "extra"); err == nil || !strings.Contains(got, "NotFound") {
		t.Errorf("the Deployment created after the point is still in kcp: %v %s", err, got)
	}
}
