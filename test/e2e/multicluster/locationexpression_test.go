package multicluster

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestLocationExpression: a Placement's locationExpression (CEL over one
// SyncTarget) selects, with the locationSelector, the physical clusters a
// namespace runs on. A bad expression is refused by kubectl apply with
// CEL's error (create and update); one that reads anything but the target
// (another tenant's data in the target's status, the Placement, other
// variables) does not compile; one too costly is refused; one that fails
// at evaluation selects nothing and the Placement's status says why;
// relabelling a SyncTarget re-evaluates it.
func TestLocationExpression(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=2s")
	const compute, shop = "root:compute", "root:shop"
	s.CreateWorkspaces(compute, shop)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	register(t, s, admin, "pc2", "region=us", pcs["pc2"])
	waitTargetsReady(t, s, compute, "pc1", "pc2")

	placement := func(expr string) string {
		return framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: sel}
spec:
  locationWorkspace: root:compute
  namespaceSelector: {}
  allClusters: true
  locationExpression: '`+strings.ReplaceAll(expr, "'", "''")+`'
`)
	}
	bad := []struct{ expr, want string }{
		{`target.labels.region ==`, "spec.locationExpression does not compile: ERROR: <input>:1:24: Syntax error"},
		{`target.readyNodes`, "spec.locationExpression must evaluate to a bool, not int"},
		{`target.nodez >= 1`, "undefined field 'nodez'"},
		// nothing but the target itself: not its status' conflicts (which
		// name other workspaces' objects), not the Placement or anything else
		{`size(target.conflicts) == 0`, "undefined field 'conflicts'"},
		{`size(target.status.drain.namespaces) > 0`, "undefined field 'status'"},
		{`placement.metadata.namespace == "x"`, "undeclared reference to 'placement'"},
		{`target.labels.all(a, target.labels.all(b, target.labels.all(c, a + b + c != "")))`, "spec.locationExpression estimated cost"},
	}
	for _, c := range bad {
		if out, err := s.KubectlErr(shop, "", "apply", "-f", placement(c.expr)); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("create with %s: want a refusal with %q, got %v\n%s", c.expr, c.want, err, out)
		}
	}
	if out, err := s.KubectlErr(shop, "", "apply", "-f", framework.WriteFile(t, "long.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: long}
spec: {locationWorkspace: root:compute, locationExpression: '`+strings.Repeat("true && ", 300)+`true'}
`)); err == nil || !strings.Contains(out, "spec.locationExpression") {
		t.Errorf("an expression over 2048 characters: %v\n%s", err, out)
	}

	// Only pc1 is in region eu with a ready node.
	s.Kubectl(shop, "apply", "-f", placement(`target.labels.region == "eu" && target.readyNodes >= 1 && target.allocatable.cpu > 0`))
	assigned := func() string {
		return s.Kubectl(shop, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 60*time.Second, "default assigned to pc1 only", func() (bool, string) {
		a := assigned()
		return a == compute+"/pc1", a
	})
	s.Kubectl(shop, "create", "deployment", "web", "--image=nginx")
	ns := syncer.DownstreamNamespace(logicalcluster.Name(shop), "default")
	pc1, pc2 := downClient(t, pcs["pc1"]), downClient(t, pcs["pc2"])
	ctx := context.Background()
	framework.Eventually(t, 90*time.Second, "web on pc1", func() (bool, string) {
		_, err := pc1.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil, "not yet"
	})
	if _, err := pc2.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the namespace is on pc2, which the expression does not select: %v", err)
	}
	if got := s.Kubectl(shop, "get", "placement", "sel", "-o", `jsonpath={.status.selectedTargets}`); got != `["root:compute/pc1"]` {
		t.Errorf("selectedTargets %s, want pc1 only", got)
	}

	// Updates are checked too.
	for _, c := range bad[:2] {
		if out, err := s.KubectlErr(shop, "", "apply", "-f", placement(c.expr)); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("update to %s: want a refusal with %q, got %v\n%s", c.expr, c.want, err, out)
		}
	}

	// The location relabels pc2: the expression now holds there too.
	s.Kubectl(compute, "label", "synctarget", "pc2", "region=eu", "--overwrite")
	framework.Eventually(t, 60*time.Second, "default on pc1 and pc2", func() (bool, string) {
		a := assigned()
		return a == compute+"/pc1,"+compute+"/pc2", a
	})

	// An expression that fails at evaluation (no gpu label) selects
	// nothing, and the status says why for each target.
	s.Kubectl(shop, "apply", "-f", placement(`target.labels.gpu == "a100"`))
	framework.Eventually(t, 60*time.Second, "the evaluation error in the status", func() (bool, string) {
		got := s.Kubectl(shop, "get", "placement", "sel", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}`)
		return strings.HasPrefix(got, "False ") && strings.Contains(got, "the locationExpression failed for pc1: no such key: gpu; pc2: no such key: gpu"), got
	})
	if got := s.Kubectl(shop, "get", "placement", "sel", "-o", `jsonpath={.status.selectedTargets}`); got != "" {
		t.Errorf("selectedTargets %s with a failing expression, want none", got)
	}
}
