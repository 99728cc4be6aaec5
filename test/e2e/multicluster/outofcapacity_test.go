package multicluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestOutOfCapacity is issue 55's automatic out-of-capacity taint on real
// physical clusters: a pod of kcp's workloads that pc1's scheduler cannot
// place (it asks for more CPU than pc1 has) makes pc1's syncer report
// OutOfCapacity, kcp taints pc1 workload.kcp.io/out-of-capacity:NoSchedule,
// and new namespaces go to pc2 while what runs on pc1 stays; once the pod
// fits, the condition and the taint go away. The taint is kcp's: nobody
// else may add or remove it.
func TestOutOfCapacity(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, shop = "root:compute", "root:shop"
	s.CreateWorkspaces(compute, shop)
	admin := adminIn(t, s, compute)
	pcs := startPhysicalWith(t, bins, physical.Options{Nodes: 1, CPU: "2"}, "pc1")
	for k, v := range startPhysical(t, bins, "pc2") {
		pcs[k] = v
	}
	register(t, s, admin, "pc1", "region=eu,site=pc1", pcs["pc1"], "--out-of-capacity-after=3s")
	register(t, s, admin, "pc2", "region=eu,site=pc2", pcs["pc2"], "--out-of-capacity-after=3s")
	waitTargetsReady(t, s, compute, "pc1", "pc2")

	s.Kubectl(shop, "apply", "-f", framework.WriteFile(t, "placements.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: first}
spec:
  locationWorkspace: "root:compute"
  locationSelector: {matchLabels: {site: pc1}}
  namespaceSelector: {matchLabels: {tier: first}}
---
apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: later}
spec:
  locationWorkspace: "root:compute"
  locationSelector: {matchLabels: {region: eu}}
  namespaceSelector: {matchLabels: {tier: later}}
`))
	s.Kubectl(shop, "create", "namespace", "first")
	s.Kubectl(shop, "label", "namespace", "first", "tier=first")
	s.Kubectl(shop, "apply", "-f", framework.WriteFile(t, "hog.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: hog, namespace: first}
spec:
  replicas: 1
  selector: {matchLabels: {app: hog}}
  template:
    metadata: {labels: {app: hog}}
    spec:
      containers:
      - name: hog
        image: registry.k8s.io/pause:3.10
        resources: {requests: {cpu: "3"}}
`))

	framework.Eventually(t, 90*time.Second, "pc1 OutOfCapacity and tainted by kcp", func() (bool, string) {
		cond := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.status.conditions[?(@.type=="OutOfCapacity")].status} {.status.conditions[?(@.type=="OutOfCapacity")].message}`)
		taints := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}`)
		return strings.HasPrefix(cond, "True ") && strings.Contains(cond, "cannot be scheduled") && strings.Contains(cond, "hog") &&
			strings.Contains(taints, "workload.kcp.io/out-of-capacity:NoSchedule"), cond + " | " + taints
	})
	if got := s.Kubectl(compute, "get", "synctarget", "pc2", "-o", `jsonpath={.status.conditions[?(@.type=="OutOfCapacity")].status} {.spec.taints}`); got != "False " {
		t.Errorf("pc2's OutOfCapacity and taints: %q, want False and none", got)
	}
	// What runs on pc1 stays there.
	if got := s.Kubectl(shop, "get", "namespace", "first", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`); got != "root:compute/pc1" {
		t.Errorf("namespace first assigned to %q, want it to stay on root:compute/pc1", got)
	}

	// The taint is kcp's: the location's admin (not system:masters)
	// cannot put it on pc2, and an edit of pc1's taints that leaves it
	// out keeps it.
	s.GrantAccess("root", "ops", "compute")
	s.Kubectl(compute, "create", "clusterrolebinding", "ops-admin", "--clusterrole=cluster-admin", "--user=ops")
	if out, err := s.KubectlErr(compute, "", "--as=ops", "patch", "synctarget", "pc2", "--type=merge", "-p",
		`{"spec":{"taints":[{"key":"workload.kcp.io/out-of-capacity","effect":"NoSchedule"}]}}`); err == nil || !strings.Contains(out, "are kcp's") {
		t.Errorf("the location's admin put kcp's out-of-capacity taint on pc2: %v\n%s", err, out)
	}
	s.KubectlErr(compute, "", "--as=ops", "patch", "synctarget", "pc1", "--type=merge", "-p", `{"spec":{"taints":null}}`)
	if got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.spec.taints[*].key}`); !strings.Contains(got, "workload.kcp.io/out-of-capacity") {
		t.Errorf("pc1's taints after the location's admin cleared them: %q, want kcp's out-of-capacity kept", got)
	}

	// New namespaces go to pc2, none to the tainted pc1.
	for i := range 4 {
		name := fmt.Sprintf("later-%d", i)
		s.Kubectl(shop, "create", "namespace", name)
		s.Kubectl(shop, "label", "namespace", name, "tier=later")
	}
	framework.Eventually(t, 60*time.Second, "every new namespace on pc2", func() (bool, string) {
		var got []string
		ok := true
		for i := range 4 {
			a := s.Kubectl(shop, "get", "namespace", fmt.Sprintf("later-%d", i), "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
			got = append(got, a)
			ok = ok && a == "root:compute/pc2"
		}
		return ok, strings.Join(got, ",")
	})

	// The pod fits once it asks for less: the condition and the taint go.
	s.Kubectl(shop, "-n", "first", "set", "resources", "deployment", "hog", "--requests=cpu=500m")
	framework.Eventually(t, 90*time.Second, "pc1 no longer out of capacity nor tainted", func() (bool, string) {
		cond := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.status.conditions[?(@.type=="OutOfCapacity")].status}`)
		taints := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", `jsonpath={.spec.taints}`)
		return cond == "False" && !strings.Contains(taints, "out-of-capacity"), cond + " | " + taints
	})
}
