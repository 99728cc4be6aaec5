package multicluster

import (
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestDrainTellsTheTruth: kubectl kcp workload drain --wait waits until
// the target has nothing left, and when a namespace cannot move (its
// Placement selects no other usable target) it says so, naming the
// workspace, the namespace and why, instead of returning as if drained;
// the SyncTarget's status.drain says the same to kubectl get. uncordon
// ends the drain and its status.
func TestDrainTellsTheTruth(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, pinned, spread = "root:compute", "root:pinned", "root:spread"
	s.CreateWorkspaces(compute, pinned, spread)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	register(t, s, admin, "pc2", "region=us", pcs["pc2"])
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(pinned, "apply", "-f", framework.WriteFile(t, "eu.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu-only}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, locationSelector: {matchLabels: {region: eu}}}
`))
	s.Kubectl(spread, "apply", "-f", framework.WriteFile(t, "one.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: anywhere}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}}
`))
	assigned := func(ws string) string {
		return s.Kubectl(ws, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 60*time.Second, "pinned on pc1", func() (bool, string) {
		a := assigned(pinned)
		return a == compute+"/pc1", a
	})
	for _, ws := range []string{pinned, spread} {
		s.Kubectl(ws, "create", "deployment", "web", "--image=nginx")
		if out, err := s.KubectlErr(ws, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
			t.Fatalf("%s: %v\n%s", ws, err, out)
		}
	}
	// pc1 holds pinned (and spread, if it was placed there).
	target := "pc1"
	out, err := s.KubectlPlugin(admin, "kcp", "workload", "drain", target, "--wait", "--timeout", "40s")
	if err == nil {
		t.Fatalf("drain --wait of a target with a namespace that cannot move succeeded:\n%s", out)
	}
	for _, want := range []string{"is not drained after 40s", "cannot move", pinned + " namespace default: Placement eu-only selects no other usable SyncTarget"} {
		if !strings.Contains(out, want) {
			t.Errorf("drain --wait output lacks %q:\n%s", want, out)
		}
	}
	if a := assigned(spread); strings.Contains(a, "pc1") {
		t.Errorf("spread's namespace still on the drained target: %s", a)
	}
	if got := s.Kubectl(compute, "get", "synctarget", target, "-o", "jsonpath={.status.drain.namespaces} {.status.drain.stuck} {.status.drain.blocked[0].workspace}"); got != "1 1 "+pinned {
		t.Errorf("status.drain: %q, want 1 namespace, stuck, in %s", got, pinned)
	}
	// The pinned team moves its Placement: the drain finishes, and --wait
	// says so.
	s.Kubectl(pinned, "patch", "placement", "eu-only", "--type=merge", "-p", `{"spec":{"locationSelector":null}}`)
	out, err = s.KubectlPlugin(admin, "kcp", "workload", "drain", target, "--wait", "--timeout", "90s")
	if err != nil || !strings.Contains(out, "drained: no namespace is assigned") {
		t.Errorf("drain --wait once everything can move: %v\n%s", err, out)
	}
	s.KubectlPlugin(admin, "kcp", "workload", "uncordon", target)
	framework.Eventually(t, 30*time.Second, "status.drain gone after uncordon", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", target, "-o", "jsonpath={.status.drain}")
		return got == "", got
	})
}
