package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestFailover kills the physical cluster a namespace runs on (its
// processes and its syncer): after the heartbeat timeout and the eviction
// delay the namespace moves to the other cluster its Placement selects and
// the Deployment is Available there; when the dead cluster comes back, its
// syncer deletes the stale copy.
func TestFailover(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=2s")
	const compute, team = "root:compute", "root:shop"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	syncers := map[string]*syncerProc{}
	for _, name := range []string{"pc1", "pc2"} {
		syncers[name] = register(t, s, admin, name, "region=eu", pcs[name])
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", locationSelector: {matchLabels: {region: eu}}, namespaceSelector: {}}
`))
	assigned := func() string {
		return s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 30*time.Second, "the namespace to be assigned", func() (bool, string) {
		a := assigned()
		return a != "", a
	})
	s.Kubectl(team, "create", "deployment", "web", "--image=nginx", "--replicas=2")
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dead := strings.TrimPrefix(assigned(), compute+"/")
	alive := map[string]string{"pc1": "pc2", "pc2": "pc1"}[dead]
	if alive == "" {
		t.Fatalf("assigned to %q", assigned())
	}
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()

	// The cluster dies: its processes and its syncer.
	killed := time.Now()
	syncers[dead].stop()
	pcs[dead].Kill()
	survivor := downClient(t, pcs[alive])
	framework.Eventually(t, 90*time.Second, "the Deployment Available on "+alive, func() (bool, string) {
		d, err := survivor.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == 2, fmt.Sprintf("available %d", d.Status.AvailableReplicas)
	})
	t.Logf("failover: Available on %s %s after %s was killed (heartbeat timeout 6s, eviction delay 2s)", alive, time.Since(killed).Round(100*time.Millisecond), dead)
	if a := assigned(); a != compute+"/"+alive {
		t.Errorf("the namespace is assigned to %q, want %s", a, alive)
	}
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=60s"); err != nil {
		t.Errorf("rollout status after failover: %v\n%s", err, out)
	}

	// The dead cluster returns: its syncer removes the stale copy.
	if err := pcs[dead].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	syncers[dead].start()
	back := downClient(t, pcs[dead])
	framework.Eventually(t, 90*time.Second, "the stale copy on "+dead+" to be deleted", func() (bool, string) {
		_, err := back.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
	if _, err := survivor.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the Deployment left %s: %v", alive, err)
	}
}
