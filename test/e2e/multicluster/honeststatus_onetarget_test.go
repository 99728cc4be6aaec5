package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestHonestStatusOfStatefulSetsAndDaemonSets: a StatefulSet, a DaemonSet
// and Jobs report through one target; when its physical cluster dies,
// their status in kcp stops counting its last report at the heartbeat
// timeout: nothing ready, Available=False naming the target, and `kubectl
// rollout status` no longer completes. When the cluster and its syncer
// return, the physical cluster's status is back.
func TestHonestStatusOfStatefulSetsAndDaemonSets(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=10m")
	const compute, team = "root:compute", "root:stateful"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	p := register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}}
`))
	framework.Eventually(t, 60*time.Second, "default placed", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1", a
	})
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "app.yaml", `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: fluent-bit}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  template:
    spec: {restartPolicy: Never, containers: [{name: migrate, image: busybox, command: ["true"]}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: waits}
spec:
  template:
    spec: {restartPolicy: Never, nodeSelector: {no-such-node: "true"}, containers: [{name: waits, image: busybox}]}
`))
	for _, w := range []string{"statefulset/db", "daemonset/agent"} {
		if out, err := s.KubectlErr(team, "", "rollout", "status", w, "--timeout=120s"); err != nil {
			t.Fatalf("rollout status %s: %v\n%s", w, err, out)
		}
	}
	ctx := context.Background()
	if out, err := s.KubectlErr(team, "", "wait", "--for=condition=Complete", "job/migrate", "--timeout=120s"); err != nil {
		t.Fatalf("job migrate: %v\n%s", err, out)
	}
	// jobs: each Job's active and ready pods and its conditions.
	jobs := func() string {
		out := ""
		for _, name := range []string{"migrate", "waits"} {
			j, err := s.Client(team).BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			ready := int32(0)
			if j.Status.Ready != nil {
				ready = *j.Status.Ready
			}
			out += fmt.Sprintf("%s active %d ready %d", name, j.Status.Active, ready)
			for _, c := range j.Status.Conditions {
				out += fmt.Sprintf(" %s=%s %s", c.Type, c.Status, c.Reason)
			}
			out += " | "
		}
		return out
	}
	framework.Eventually(t, 60*time.Second, "job waits to have its pod", func() (bool, string) {
		st := jobs()
		return strings.Contains(st, "waits active 1"), st
	})
	status := func() string {
		sts, err := s.Client(team).AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		ds, err := s.Client(team).AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		out := fmt.Sprintf("sts ready %d | ds ready %d/%d |", sts.Status.ReadyReplicas, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
		for _, c := range sts.Status.Conditions {
			out += fmt.Sprintf(" sts %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
		for _, c := range ds.Status.Conditions {
			out += fmt.Sprintf(" ds %s=%s %s", c.Type, c.Status, c.Reason)
		}
		return out
	}
	if st := status(); !strings.HasPrefix(st, "sts ready 2 | ds ready 3/3") {
		t.Fatalf("before: %s", st)
	}

	p.stop()
	pcs["pc1"].Kill()
	for _, w := range []string{"statefulset/db", "daemonset/agent"} {
		if out, err := s.KubectlErr(team, "", "wait", "--for=condition=Available=False", w, "--timeout=90s"); err != nil {
			t.Fatalf("kubectl wait --for=condition=Available=False %s: %v\n%s\n%s", w, err, out, status())
		}
	}
	st := status()
	if !strings.HasPrefix(st, "sts ready 0 | ds ready 0/3 |") || !strings.Contains(st, "SyncTargetNotReady: root:compute/pc1: no heartbeat from the syncer since") {
		t.Errorf("while pc1 is dead: %s", st)
	}
	// A Job still running there: not ready, Available=False naming the
	// target; a Job that completed stays Complete, untouched.
	framework.Eventually(t, 30*time.Second, "job waits marked", func() (bool, string) {
		st := jobs()
		return strings.Contains(st, "waits active 1 ready 0 Available=False SyncTargetNotReady"), st
	})
	if st := jobs(); !strings.HasPrefix(st, "migrate active 0 ready 0 ") || !strings.Contains(strings.Split(st, "|")[0], "Complete=True") ||
		strings.Contains(strings.Split(st, "|")[0], "SyncTargetNotReady") {
		t.Errorf("a completed Job's status changed while pc1 is dead: %s", st)
	}
	for _, w := range []string{"statefulset/db", "daemonset/agent"} {
		if out, err := s.KubectlErr(team, "", "rollout", "status", w, "--timeout=3s"); err == nil {
			t.Errorf("rollout status %s completed while pc1 is dead:\n%s", w, out)
		}
	}

	if err := pcs["pc1"].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	p.start()
	framework.Eventually(t, 120*time.Second, "the physical cluster's status back", func() (bool, string) {
		st := status()
		js := jobs()
		return strings.HasPrefix(st, "sts ready 2 | ds ready 3/3") && !strings.Contains(st, "SyncTargetNotReady") && !strings.Contains(js, "SyncTargetNotReady"), st + " " + js
	})
}
