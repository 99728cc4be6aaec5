package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestHonestStatus kills a physical cluster and watches, with kubectl in
// the workspaces, what the status says while it is dead (issue 51 item 4).
// The eviction delay is long, so nothing moves during the test: what
// changes is the status alone. From the heartbeat timeout on, a Deployment
// divided over both clusters counts only the live cluster's replicas and
// its Available condition names the dead target; a Deployment on the dead
// cluster alone is Available=False (reason SyncTargetNotReady) and
// rollout status does not complete; a DaemonSet on both clusters, summed,
// counts the live cluster's nodes only. When the cluster and its syncer
// come back, the status is the truth again.
func TestHonestStatus(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=10m")
	const compute, split, solo = "root:compute", "root:split", "root:solo"
	s.CreateWorkspaces(compute, split, solo)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	syncers := map[string]*syncerProc{
		"pc1": register(t, s, admin, "pc1", "region=eu", pcs["pc1"]),
		"pc2": register(t, s, admin, "pc2", "region=us", pcs["pc2"]),
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(split, "apply", "-f", framework.WriteFile(t, "divide.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: both}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, mode: Divide}
`))
	s.Kubectl(solo, "apply", "-f", framework.WriteFile(t, "eu.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, locationSelector: {matchLabels: {region: eu}}}
`))
	assigned := func(ws string) string {
		return s.Kubectl(ws, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 60*time.Second, "split on pc1 and pc2, solo on pc1", func() (bool, string) {
		a, b := assigned(split), assigned(solo)
		return a == "root:compute/pc1,root:compute/pc2" && b == "root:compute/pc1", a + " | " + b
	})
	s.Kubectl(split, "create", "deployment", "web", "--image=nginx", "--replicas=4")
	s.Kubectl(solo, "create", "deployment", "web", "--image=nginx", "--replicas=2")
	for _, ws := range []string{split, solo} {
		if out, err := s.KubectlErr(ws, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
			t.Fatalf("rollout status in %s: %v\n%s", ws, err, out)
		}
	}
	// status is what kubectl get deployment web -o yaml says, in short
	// (absent counts are 0, as kubectl shows them).
	status := func(ws string) string {
		d, err := s.Client(ws).AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		out := fmt.Sprintf("ready %d/%d available %d unavailable %d |", d.Status.ReadyReplicas, *d.Spec.Replicas, d.Status.AvailableReplicas, d.Status.UnavailableReplicas)
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable {
				out += fmt.Sprintf(" %s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return out
	}
	framework.Eventually(t, 60*time.Second, "split 4/4 Available", func() (bool, string) {
		st := status(split)
		return strings.HasPrefix(st, "ready 4/4 available 4 ") && strings.Contains(st, "| True "), st
	})
	// A DaemonSet runs on every node of both clusters (3 each): its status
	// is the sum of its copies'.
	s.Kubectl(split, "apply", "-f", framework.WriteFile(t, "agent.yaml", `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: fluent-bit}]}
`))
	dsStatus := func() string {
		ds, err := s.Client(split).AppsV1().DaemonSets("default").Get(context.Background(), "agent", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		out := fmt.Sprintf("desired %d ready %d available %d unavailable %d |", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady, ds.Status.NumberAvailable, ds.Status.NumberUnavailable)
		for _, c := range ds.Status.Conditions {
			out += fmt.Sprintf(" %s %s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
		return out
	}
	framework.Eventually(t, 90*time.Second, "the DaemonSet summed over both clusters", func() (bool, string) {
		st := dsStatus()
		return st == "desired 6 ready 6 available 6 unavailable 0 |", st
	})
	if out, err := s.KubectlErr(split, "", "rollout", "status", "daemonset/agent", "--timeout=60s"); err != nil {
		t.Errorf("rollout status daemonset/agent: %v\n%s", err, out)
	}

	// pc1 dies: its processes and its syncer.
	syncers["pc1"].stop()
	pcs["pc1"].Kill()
	for _, ws := range []string{split, solo} {
		if out, err := s.KubectlErr(ws, "", "wait", "--for=condition=Available=False", "deployment/web", "--timeout=90s"); err != nil {
			t.Fatalf("kubectl wait --for=condition=Available=False in %s: %v\n%s\n%s", ws, err, out, status(ws))
		}
	}
	framework.Eventually(t, 30*time.Second, "split counting pc2's 2 replicas only, naming pc1", func() (bool, string) {
		st := status(split)
		return strings.HasPrefix(st, "ready 2/4 available 2 unavailable 2 | False SyncTargetNotReady: ") &&
			strings.Contains(st, "root:compute/pc1: no heartbeat from the syncer since"), st
	})
	framework.Eventually(t, 30*time.Second, "the DaemonSet counting pc2's nodes only, naming pc1", func() (bool, string) {
		st := dsStatus()
		return strings.HasPrefix(st, "desired 6 ready 3 available 3 unavailable 3 | Available False SyncTargetNotReady: 1 of 2 clusters report: not counted: root:compute/pc1: no heartbeat"), st
	})
	framework.Eventually(t, 30*time.Second, "solo: nothing available, naming pc1", func() (bool, string) {
		st := status(solo)
		return strings.HasPrefix(st, "ready 0/2 available 0 unavailable 2 | False SyncTargetNotReady: root:compute/pc1: no heartbeat from the syncer since"), st
	})
	// rollout status does not report success while pc1's share is unknown.
	for _, ws := range []string{split, solo} {
		if out, err := s.KubectlErr(ws, "", "rollout", "status", "deployment/web", "--timeout=3s"); err == nil {
			t.Errorf("rollout status in %s completed while pc1 is dead:\n%s", ws, out)
		}
	}
	// This is status alone: nothing was evicted.
	if a, b := assigned(split), assigned(solo); a != "root:compute/pc1,root:compute/pc2" || b != "root:compute/pc1" {
		t.Errorf("the namespaces moved (eviction delay 10m): %s | %s", a, b)
	}

	// pc1 returns: the status is the truth again.
	if err := pcs["pc1"].Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	syncers["pc1"].start()
	for _, ws := range []string{split, solo} {
		if out, err := s.KubectlErr(ws, "", "wait", "--for=condition=Available=True", "deployment/web", "--timeout=120s"); err != nil {
			t.Fatalf("kubectl wait --for=condition=Available=True in %s after pc1 returned: %v\n%s\n%s", ws, err, out, status(ws))
		}
		if out, err := s.KubectlErr(ws, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
			t.Errorf("rollout status in %s after pc1 returned: %v\n%s", ws, err, out)
		}
	}
	framework.Eventually(t, 90*time.Second, "the DaemonSet back to the truth", func() (bool, string) {
		st := dsStatus()
		return st == "desired 6 ready 6 available 6 unavailable 0 |", st
	})
	want := map[string]string{split: "ready 4/4 available 4 ", solo: "ready 2/2 available 2 "}
	for ws, prefix := range want {
		framework.Eventually(t, 60*time.Second, fmt.Sprintf("%s back to the truth", ws), func() (bool, string) {
			st := status(ws)
			return strings.HasPrefix(st, prefix) && !strings.Contains(st, "pc1"), st
		})
	}
}
