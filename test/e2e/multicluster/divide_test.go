package multicluster

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestDivideSpreadAndFailover is issue 16's placement on three real
// physical clusters: team-a divides a Deployment's replicas over all of
// them by static weights with a per-region image override, and kubectl in
// the workspace sees the sum (rollout status, READY); scale and a new
// image go through every share. team-b runs the same names duplicated on
// one cluster per region (spreadByLabel), undisturbed by team-a. Then one
// cluster dies and team-a's replicas are divided over the two left.
func TestDivideSpreadAndFailover(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=2s")
	const compute, teamA, teamB = "root:compute", "root:team-a", "root:team-b"
	s.CreateWorkspaces(compute, teamA, teamB)
	admin := adminIn(t, s, compute)
	regions := map[string]string{"pc1": "eu", "pc2": "us", "pc3": "eu"}
	pcs := startPhysical(t, bins, "pc1", "pc2", "pc3")
	syncers := map[string]*syncerProc{}
	down := map[string]*kubernetes.Clientset{}
	for _, name := range []string{"pc1", "pc2", "pc3"} {
		syncers[name] = register(t, s, admin, name, "region="+regions[name], pcs[name])
		down[name] = downClient(t, pcs[name])
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2", "pc3")

	// A Placement that cannot mean anything is refused, not half-applied.
	if out, err := s.KubectlErr(teamA, "", "apply", "-f", framework.WriteFile(t, "bad.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: bad}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, numberOfClusters: 2}
`)); err == nil || !strings.Contains(out, "not both") {
		t.Errorf("numberOfClusters with allClusters: want a refusal, got %v\n%s", err, out)
	}
	if out, err := s.KubectlErr(teamA, "", "apply", "-f", framework.WriteFile(t, "bad.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: bad}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, mode: Split}
`)); err == nil || !strings.Contains(out, "Unsupported value") {
		t.Errorf("an unknown mode: want a refusal, got %v\n%s", err, out)
	}

	s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "divide.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: everywhere}
spec:
  locationWorkspace: "root:compute"
  namespaceSelector: {}
  allClusters: true
  mode: Divide
  weights: [{selector: {region: us}, weight: 2}]
  overrides:
  - selector: {region: us}
    resource: deployments.apps
    patch: {spec: {template: {spec: {containers: [{name: nginx, image: us.registry.example/nginx}]}}}}
`))
	s.Kubectl(teamB, "apply", "-f", framework.WriteFile(t, "spread.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: one-per-region}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, spreadByLabel: region}
`))
	targetsOf := func(ws string) string {
		return s.Kubectl(ws, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 30*time.Second, "team-a on all three, team-b on one per region", func() (bool, string) {
		a, b := targetsOf(teamA), targetsOf(teamB)
		return a == "root:compute/pc1,root:compute/pc2,root:compute/pc3" && strings.Count(b, ",") == 1 && strings.Contains(b, "pc2"), a + " | " + b
	})

	ctx := context.Background()
	nsA, nsB := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default"), syncer.DownstreamNamespace(logicalcluster.Name(teamB), "default")
	// shares returns each cluster's downstream replicas and images of web.
	shares := func(ns string, names ...string) (map[string]int32, map[string]string) {
		replicas, images := map[string]int32{}, map[string]string{}
		for _, n := range names {
			d, err := down[n].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				continue
			}
			replicas[n] = *d.Spec.Replicas
			images[n] = d.Spec.Template.Spec.Containers[0].Image
		}
		return replicas, images
	}
	rollout := func(ws string) {
		t.Helper()
		if out, err := s.KubectlErr(ws, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
			t.Fatalf("rollout status in %s: %v\n%s\n%s\n%s", ws, err, out[max(0, len(out)-300):],
				s.Kubectl(ws, "get", "deployment", "web", "-o", "yaml"), s.Kubectl(ws, "get", "namespace", "default", "-o", "yaml"))
		}
	}
	ready := func(ws string) string {
		return s.Kubectl(ws, "get", "deployment", "web", "-o", "jsonpath={.status.readyReplicas}/{.spec.replicas} available {.status.availableReplicas}")
	}

	s.Kubectl(teamA, "create", "deployment", "web", "--image=nginx", "--replicas=8")
	s.Kubectl(teamB, "create", "deployment", "web", "--image=nginx", "--replicas=2")
	rollout(teamA)
	// Weights 1:2:1 -> 2, 4, 2; the us cluster runs its own registry's image.
	replicas, images := shares(nsA, "pc1", "pc2", "pc3")
	if fmt.Sprint(replicas) != "map[pc1:2 pc2:4 pc3:2]" || fmt.Sprint(images) != "map[pc1:nginx pc2:us.registry.example/nginx pc3:nginx]" {
		t.Errorf("team-a's shares: %v %v", replicas, images)
	}
	if got := ready(teamA); got != "8/8 available 8" {
		t.Errorf("team-a's Deployment in kcp: %s, want 8/8", got)
	}

	// Where each share runs, with SQL.
	kcpBin, _ := framework.Binaries(t)
	if out, err := exec.Command(kcpBin, "sql", "--root-dir", s.RootDir, "--report", "placements", "-o", "csv").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "root:team-a,default,web,root:compute/pc2,Divide,4,4") || !strings.Contains(string(out), "root:team-a,default,web,root:compute/pc1,Divide,2,2") {
		t.Errorf("kcp sql --report placements: %v\n%s", err, out)
	}

	// team-b: the whole Deployment on two clusters, one per region; its
	// status is the least available copy (2), not the sum.
	rollout(teamB)
	replicas, _ = shares(nsB, "pc1", "pc2", "pc3")
	if len(replicas) != 2 || replicas["pc2"] != 2 || replicas["pc1"]+replicas["pc3"] != 2 {
		t.Errorf("team-b's copies: %v", replicas)
	}
	if got := ready(teamB); got != "2/2 available 2" {
		t.Errorf("team-b's Deployment in kcp: %s", got)
	}

	// kubectl scale and a new image roll through every share; the
	// override still wins on the us cluster.
	s.Kubectl(teamA, "scale", "deployment", "web", "--replicas=4")
	s.Kubectl(teamA, "set", "image", "deployment/web", "nginx=nginx:1.27")
	rollout(teamA)
	framework.Eventually(t, 30*time.Second, "the new shares and images downstream", func() (bool, string) {
		replicas, images := shares(nsA, "pc1", "pc2", "pc3")
		got := fmt.Sprint(replicas, images)
		return got == "map[pc1:1 pc2:2 pc3:1] map[pc1:nginx:1.27 pc2:us.registry.example/nginx pc3:nginx:1.27]", got
	})
	framework.Eventually(t, 60*time.Second, "4/4 in kcp", func() (bool, string) {
		got := ready(teamA)
		return got == "4/4 available 4", got
	})

	// pc3 dies (its processes and its syncer): team-a's 4 replicas are
	// divided over pc1 and pc2 and Available there.
	stale, err := down["pc3"].AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	syncers["pc3"].stop()
	pcs["pc3"].Kill()
	framework.Eventually(t, 90*time.Second, "team-a's 4 replicas Available on pc1 and pc2", func() (bool, string) {
		var sum, avail int32
		for _, n := range []string{"pc1", "pc2"} {
			d, err := down[n].AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			sum += *d.Spec.Replicas
			avail += d.Status.AvailableReplicas
		}
		return sum == 4 && avail == 4 && targetsOf(teamA) == "root:compute/pc1,root:compute/pc2", fmt.Sprintf("replicas %d available %d on %s", sum, avail, targetsOf(teamA))
	})
	t.Logf("failover of a divided Deployment: Available on the survivors %s after pc3 was killed (heartbeat timeout 6s, eviction delay 2s)", time.Since(killed).Round(100*time.Millisecond))
	framework.Eventually(t, 60*time.Second, "team-a's Deployment 4/4 in kcp again", func() (bool, string) {
		got := ready(teamA)
		return got == "4/4 available 4", got
	})
	rollout(teamA)

	// Planned maintenance: pc2 is drained. team-a's copy there stays until
	// pc1 runs all 4 replicas Available, so the Deployment never has fewer
	// than 4 available; then pc2 has nothing of team-a left.
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "drain", "pc2"); err != nil || !strings.Contains(out, "SyncTarget pc2 draining") {
		t.Fatalf("kubectl kcp workload drain: %v\n%s", err, out)
	}
	drained := time.Now()
	least := int64(1 << 30)
	framework.Eventually(t, 90*time.Second, "team-a drained off pc2 onto pc1", func() (bool, string) {
		available, _ := strconv.ParseInt(s.Kubectl(teamA, "get", "deployment", "web", "-o", "jsonpath={.status.availableReplicas}"), 10, 64)
		least = min(least, available)
		_, err := down["pc2"].AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
		d, err1 := down["pc1"].AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
		if err1 != nil {
			return false, err1.Error()
		}
		return err != nil && d.Status.AvailableReplicas == 4 && targetsOf(teamA) == "root:compute/pc1",
			fmt.Sprintf("pc2: %v; pc1 available %d; assigned %s\n%s", err, d.Status.AvailableReplicas, targetsOf(teamA),
				s.Kubectl(teamA, "get", "deployment", "web", "-o", "jsonpath={.metadata.generation} {.metadata.annotations}"))
	})
	t.Logf("drain of pc2: %s", time.Since(drained).Round(100*time.Millisecond))
	if least < 4 {
		t.Errorf("during the drain team-a's Deployment had %d available, fewer than its 4", least)
	}
	framework.Eventually(t, 30*time.Second, "4/4 in kcp after the drain", func() (bool, string) {
		got := ready(teamA)
		return got == "4/4 available 4", got
	})
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "uncordon", "pc2"); err != nil || !strings.Contains(out, "uncordoned") {
		t.Errorf("uncordon: %v\n%s", err, out)
	}

	// pc3 comes back: its syncer deletes the stale copy before pc3 counts
	// again (its SyncTarget says CaughtUp), then pc3 gets a share anew.
	if err := pcs["pc3"].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	syncers["pc3"].start()
	back := time.Now()
	defer func() {
		t.Logf("pc3 back with a share %s after its restart", time.Since(back).Round(100*time.Millisecond))
	}()
	framework.Eventually(t, 150*time.Second, "pc3 back with a new copy and team-a's 4 replicas over three clusters", func() (bool, string) {
		d, err := down["pc3"].AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		replicas, _ := shares(nsA, "pc1", "pc2", "pc3")
		sum := replicas["pc1"] + replicas["pc2"] + replicas["pc3"]
		return d.UID != stale.UID && len(replicas) == 3 && sum == 4, fmt.Sprintf("pc3's copy %s (stale %s), shares %v", d.UID, stale.UID, replicas)
	})
	if out := s.Kubectl(compute, "get", "synctarget", "pc3", "-o", `jsonpath={.status.conditions[?(@.type=="CaughtUp")].status}`); out != "True" {
		t.Errorf("pc3's CaughtUp condition: %q", out)
	}
	framework.Eventually(t, 60*time.Second, "4/4 in kcp over three clusters", func() (bool, string) {
		got := ready(teamA)
		return got == "4/4 available 4", got
	})
}
