package multicluster

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestTaints: a location admin taints SyncTargets with kubectl kcp
// workload taint. NoSchedule keeps a new namespace of a Placement that
// does not tolerate it off the target; a reserved taint cannot be
// tolerated by a tenant's Placement (refused at admission, with the
// reason), only by the workspaces it is reserved for; a tenant with "use"
// on the SyncTargets cannot taint them; NoExecute with tolerationSeconds
// keeps the namespace on the target while the toleration lasts and moves
// it after; cordon shows as kcp's unschedulable taint, which no Placement
// may tolerate; bad taints and tolerations are refused with what is wrong.
func TestTaints(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=2s")
	const compute, shop, ml = "root:compute", "root:shop", "root:ml"
	s.CreateWorkspaces(compute, shop, ml)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	register(t, s, admin, "pc2", "region=eu", pcs["pc2"])
	waitTargetsReady(t, s, compute, "pc1", "pc2")

	// ops administers the location (cluster-admin in compute, not
	// system:masters); alice is a tenant: admin of shop, "use" on the
	// location's SyncTargets.
	s.GrantAccess("root", "ops", "compute")
	s.Kubectl(compute, "create", "clusterrolebinding", "ops-admin", "--clusterrole=cluster-admin", "--user=ops")
	s.GrantAccess("root", "alice", "shop", "compute")
	s.Kubectl(shop, "create", "clusterrolebinding", "alice-admin", "--clusterrole=cluster-admin", "--user=alice")
	s.Kubectl(compute, "apply", "-f", framework.WriteFile(t, "use.yaml", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: synctarget-user}
rules: [{apiGroups: [workload.kcp.io], resources: [synctargets], verbs: [use]}]
`))
	s.Kubectl(compute, "create", "clusterrolebinding", "alice-uses-synctargets", "--clusterrole=synctarget-user", "--user=alice")
	asOps := func(args ...string) (string, error) {
		// (kubectl finds a plugin only when its name comes first.)
		return s.KubectlPlugin(admin, append(args, "--as=ops")...)
	}

	// The location reserves gpu on pc1 for root:ml.
	if out, err := asOps("kcp", "workload", "taint", "pc1", "gpu=a100:NoSchedule", "--reserved", "--tolerable-by", ml); err != nil || !strings.Contains(out, "SyncTarget pc1 tainted") {
		t.Fatalf("kubectl kcp workload taint as the location's admin: %v\n%s", err, out)
	}
	if got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.spec.taints[?(@.key=="gpu")].timeAdded}`); got == "" {
		t.Errorf("kcp set no timeAdded on the taint")
	}

	// A tenant cannot taint or untaint the location's SyncTargets.
	for _, patch := range []string{`{"spec":{"taints":[{"key":"mine","effect":"NoExecute"}]}}`, `{"spec":{"taints":null}}`} {
		if out, err := s.KubectlErr(compute, "", "--as=alice", "patch", "synctarget", "pc1", "--type=merge", "-p", patch); err == nil || !strings.Contains(out, "forbidden") {
			t.Errorf("a tenant patched the SyncTarget's taints (%s): %v\n%s", patch, err, out)
		}
	}
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "taint", "pc2", "mine:NoExecute", "--as=alice"); err == nil {
		t.Errorf("a tenant tainted pc2 with the plugin:\n%s", out)
	}
	if got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.spec.taints[*].key}`); got != "gpu" {
		t.Errorf("pc1's taints after the tenant's attempts: %q, want gpu", got)
	}

	// Bad taints, and kcp's own, are refused with what is wrong.
	for _, c := range []struct{ patch, want string }{
		{`{"spec":{"taints":[{"key":"bad key","effect":"NoSchedule"}]}}`, `spec.taints[0].key "bad key"`},
		{`{"spec":{"taints":[{"key":"x","effect":"Sometimes"}]}}`, `Unsupported value: "Sometimes"`},
		{`{"spec":{"taints":[{"key":"x","effect":"NoSchedule","tolerableBy":["root:ml"]}]}}`, "tolerableBy applies to reserved taints only"},
		{`{"spec":{"taints":[{"key":"workload.kcp.io/not-ready","effect":"NoExecute"}]}}`, "are kcp's"},
	} {
		if out, err := s.KubectlErr(compute, "", "--as=ops", "patch", "synctarget", "pc2", "--type=merge", "-p", c.patch); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("patch %s: want a refusal with %q, got %v\n%s", c.patch, c.want, err, out)
		}
	}

	placement := func(tolerations string) string {
		return framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec:
  locationWorkspace: root:compute
  locationSelector: {matchLabels: {region: eu}}
  namespaceSelector: {}
  allClusters: true
  tolerations: `+tolerations+`
`)
	}
	// A tenant's Placement cannot tolerate the reserved taint, nor cordon.
	for _, c := range []struct{ tolerations, want string }{
		{`[{key: gpu, operator: Exists}]`, "SyncTarget pc1 of root:compute reserves its taint gpu (NoSchedule) for Placements of root:ml: Placements of root:shop may not tolerate it"},
		{`[{key: gpu, value: a100, effect: NoSchedule}]`, "reserves its taint gpu"},
		{`[{key: workload.kcp.io/unschedulable, operator: Exists}]`, "(cordon) cannot be tolerated"},
		{`[{key: x, operator: Exists, value: v}]`, "value must be empty"},
		{`[{operator: Equal, value: v}]`, "needs operator Exists"},
		{`[{key: x, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}]`, "tolerationSeconds applies to NoExecute taints only"},
	} {
		if out, err := s.KubectlErr(shop, "", "--as=alice", "apply", "-f", placement(c.tolerations)); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("tolerations %s: want a refusal with %q, got %v\n%s", c.tolerations, c.want, err, out)
		}
	}
	// root:ml may tolerate it.
	s.Kubectl(ml, "apply", "-f", placement(`[{key: gpu, operator: Exists}]`))

	assigned := func(ws string) string {
		return s.Kubectl(ws, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	// NoSchedule: shop's namespace (every target, untolerated taint) goes
	// to pc2 only; ml's to both.
	if out, err := s.KubectlErr(shop, "", "--as=alice", "apply", "-f", placement(`[]`)); err != nil {
		t.Fatalf("the tenant's Placement without tolerations: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "ml on both targets", func() (bool, string) {
		a := assigned(ml)
		return a == compute+"/pc1,"+compute+"/pc2", a
	})
	framework.Eventually(t, 60*time.Second, "shop on pc2", func() (bool, string) {
		a := assigned(shop)
		return a == compute+"/pc2", a
	})
	if got := s.Kubectl(shop, "get", "placement", "eu", "-o", `jsonpath={.status.selectedTargets} {.status.conditions[?(@.type=="Ready")].message}`); !strings.Contains(got, "not tolerated: the taints of pc1") {
		t.Errorf("the Placement's status does not say pc1's taints are not tolerated: %s", got)
	}
	// Still only pc2 a moment later (the NoSchedule taint holds).
	time.Sleep(3 * time.Second)
	if a := assigned(shop); a != compute+"/pc2" {
		t.Errorf("shop moved onto the tainted target: %s", a)
	}

	// The taint goes: shop runs on both.
	if out, err := asOps("kcp", "workload", "taint", "pc1", "gpu-"); err != nil {
		t.Fatalf("removing the taint: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "shop on both targets", func() (bool, string) {
		a := assigned(shop)
		return a == compute+"/pc1,"+compute+"/pc2", a
	})
	s.Kubectl(shop, "create", "deployment", "web", "--image=nginx")
	if out, err := s.KubectlErr(shop, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// NoExecute on pc2, tolerated for 40 s by shop: its namespace stays on
	// pc2 while the toleration lasts, and moves away after.
	if out, err := s.KubectlErr(shop, "", "--as=alice", "apply", "-f", placement(`[{key: maintenance, operator: Exists, effect: NoExecute, tolerationSeconds: 40}]`)); err != nil {
		t.Fatalf("the tenant's Placement tolerating maintenance: %v\n%s", err, out)
	}
	ns := syncer.DownstreamNamespace(logicalcluster.Name(shop), "default")
	pc2 := downClient(t, pcs["pc2"])
	ctx := context.Background()
	if out, err := asOps("kcp", "workload", "taint", "pc2", "maintenance=true:NoExecute"); err != nil {
		t.Fatalf("tainting pc2 NoExecute: %v\n%s", err, out)
	}
	tainted := time.Now()
	added := s.Kubectl(compute, "get", "synctarget", "pc2", "-o", `jsonpath={.spec.taints[?(@.key=="maintenance")].timeAdded}`)
	for i := 0; time.Since(tainted) < 25*time.Second; i++ {
		if a := assigned(shop); a != compute+"/pc1,"+compute+"/pc2" {
			t.Fatalf("%s after the NoExecute taint (added %s, tolerated 40 s), shop's namespace is on %q, want still on pc2 too", time.Since(tainted).Round(time.Second), added, a)
		}
		if _, err := pc2.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil {
			t.Fatalf("the Deployment left pc2 while the toleration lasts: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	framework.Eventually(t, 120*time.Second, "shop's namespace off pc2 once the toleration ended", func() (bool, string) {
		a := assigned(shop)
		return a == compute+"/pc1", a
	})
	framework.Eventually(t, 90*time.Second, "the copy on pc2 deleted", func() (bool, string) {
		_, err := pc2.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err != nil, "still there"
	})
	t.Logf("NoExecute tolerated for 40 s: the namespace left pc2 %s after the taint", time.Since(tainted).Round(time.Second))
	// ml, which does not tolerate maintenance, left pc2 long before.
	if a := assigned(ml); a != compute+"/pc1" {
		t.Errorf("ml, not tolerating maintenance, is on %q, want pc1 only", a)
	}

	// A NoExecute taint that nothing can move away from (pc2 cordoned):
	// the namespaces stay, and pc1's status says which and why.
	if out, err := asOps("kcp", "workload", "cordon", "pc2"); err != nil {
		t.Fatalf("cordon pc2: %v\n%s", err, out)
	}
	if out, err := asOps("kcp", "workload", "taint", "pc1", "evacuate=now:NoExecute"); err != nil {
		t.Fatalf("tainting pc1 NoExecute: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "pc1's status to name the namespaces that cannot leave", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.status.drain.stuck} {.status.drain.message} {.status.drain.blocked[*].reason}`)
		return strings.HasPrefix(got, "2 ") && strings.Contains(got, "cannot move") &&
			strings.Contains(got, "Placement eu does not tolerate the taint evacuate:NoExecute, and selects no other usable SyncTarget"), got
	})
	for _, ws := range []string{shop, ml} {
		if a := assigned(ws); a != compute+"/pc1" {
			t.Errorf("%s left pc1 with nowhere to go: %q", ws, a)
		}
	}
	if out, err := asOps("kcp", "workload", "taint", "pc1", "evacuate-"); err != nil {
		t.Fatalf("untainting pc1: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "pc1's status without stuck namespaces", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.status.drain}`)
		return got == "", got
	})
	s.KubectlPlugin(admin, "kcp", "workload", "uncordon", "pc2")

	// Cordon shows as kcp's unschedulable taint, and uncordon removes it.
	if out, err := asOps("kcp", "workload", "cordon", "pc1"); err != nil {
		t.Fatalf("cordon: %v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "the unschedulable taint on pc1", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.spec.taints[*].key}={.spec.taints[*].effect}`)
		return got == "workload.kcp.io/unschedulable=NoSchedule", got
	})
	// An edit that leaves kcp's taint out keeps it.
	if out, err := asOps("kcp", "workload", "taint", "pc1", "extra=1:PreferNoSchedule"); err != nil {
		t.Fatalf("tainting a cordoned target: %v\n%s", err, out)
	}
	s.Kubectl(compute, "--as=ops", "patch", "synctarget", "pc1", "--type=merge", "-p", `{"spec":{"taints":[{"key":"extra","value":"2","effect":"PreferNoSchedule"}]}}`)
	if got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.spec.taints[*].key}`); got != "extra workload.kcp.io/unschedulable" {
		t.Errorf("taints after an edit that left kcp's out: %q", got)
	}
	s.KubectlPlugin(admin, "kcp", "workload", "uncordon", "pc1")
	framework.Eventually(t, 30*time.Second, "the unschedulable taint gone", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.spec.taints[*].key}`)
		return got == "extra", got
	})
}

// TestEvictionRateLimit: two SyncTargets die at once (their syncers stop;
// the physical clusters run on). With --placement-eviction-rate at one
// target per 60 s, the namespace of one moves to the surviving target
// while the other's waits, on a target whose status says it waits for the
// rate limit; then it moves too. Each SyncTarget meanwhile carries kcp's
// not-ready taint.
func TestEvictionRateLimit(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=2s", "--placement-eviction-rate=0.0166")
	const compute, teamA, teamB = "root:compute", "root:team-a", "root:team-b"
	s.CreateWorkspaces(compute, teamA, teamB)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2", "pc3")
	syncers := map[string]*syncerProc{}
	for name, zone := range map[string]string{"pc1": "a", "pc2": "b", "pc3": "c"} {
		syncers[name] = register(t, s, admin, name, "zone="+zone, pcs[name])
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2", "pc3")
	// team-a runs in zone a or c, team-b in zone b or c; with pc3 cordoned
	// first, each lands on its own target.
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "cordon", "pc3"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for ws, zone := range map[string]string{teamA: "a", teamB: "b"} {
		s.Kubectl(ws, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: zone}
spec:
  locationWorkspace: root:compute
  locationSelector: {matchExpressions: [{key: zone, operator: In, values: [`+zone+`, c]}]}
  namespaceSelector: {}
`))
	}
	assigned := func(ws string) string {
		return s.Kubectl(ws, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 60*time.Second, "team-a on pc1 and team-b on pc2", func() (bool, string) {
		a, b := assigned(teamA), assigned(teamB)
		return a == compute+"/pc1" && b == compute+"/pc2", a + " " + b
	})
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "uncordon", "pc3"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// pc1 and pc2 die at once.
	syncers["pc1"].stop()
	syncers["pc2"].stop()
	died := time.Now()
	for _, name := range []string{"pc1", "pc2"} {
		framework.Eventually(t, 60*time.Second, name+" tainted not-ready", func() (bool, string) {
			got := s.Kubectl(compute, "get", "synctarget", name, "-o", `jsonpath={.spec.taints[*].key}={.spec.taints[*].effect}`)
			return got == "workload.kcp.io/not-ready=NoExecute", got
		})
	}
	var first, second, firstWS, secondWS string
	framework.Eventually(t, 60*time.Second, "one team moved to pc3", func() (bool, string) {
		a, b := assigned(teamA), assigned(teamB)
		switch {
		case a == compute+"/pc3":
			first, second, firstWS, secondWS = "pc1", "pc2", teamA, teamB
		case b == compute+"/pc3":
			first, second, firstWS, secondWS = "pc2", "pc1", teamB, teamA
		default:
			return false, a + " " + b
		}
		return true, ""
	})
	t.Logf("%s's namespace left %s for pc3 %s after both died", firstWS, first, time.Since(died).Round(time.Second))
	if a := assigned(secondWS); a != compute+"/"+second {
		t.Fatalf("when %s's namespace moved, %s's was on %q: want it still on %s, waiting for the rate limit", firstWS, secondWS, a, second)
	}
	framework.Eventually(t, 20*time.Second, second+" saying its evictions wait for the rate limit", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", second, "-o", `jsonpath={.status.conditions[?(@.type=="EvictionRateLimited")].status} {.status.conditions[?(@.type=="EvictionRateLimited")].message}`)
		return strings.HasPrefix(got, "True ") && strings.Contains(got, "wait for the eviction rate limit"), got
	})
	if a := assigned(secondWS); a != compute+"/"+second {
		t.Fatalf("%s's namespace left %s while the rate limit held: %q", secondWS, second, a)
	}
	framework.Eventually(t, 120*time.Second, secondWS+" moved to pc3 in its turn", func() (bool, string) {
		a := assigned(secondWS)
		return a == compute+"/pc3", a
	})
	t.Logf("%s's namespace left %s %s after both died", secondWS, second, time.Since(died).Round(time.Second))
	framework.Eventually(t, 20*time.Second, "the EvictionRateLimited condition gone", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", second, "-o", `jsonpath={.status.conditions[?(@.type=="EvictionRateLimited")].status}`)
		return got == "", got
	})
}
