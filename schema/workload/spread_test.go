package workload

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestSpreadOneRunsOnFirstTarget(t *testing.T) {
	sts := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	dep := schema.GroupResource{Group: "apps", Resource: "deployments"}
	var none *NamespacePolicy
	if !none.Runs(sts, "a") || none.One() != "" {
		t.Error("without a policy the one target runs everything")
	}
	for _, mode := range []string{ModeDuplicate, ModeDivide} {
		p := &NamespacePolicy{Mode: mode, Targets: map[string]TargetPolicy{"b": {Weight: 1}, "a": {Weight: 1, Leaving: true}, "c": {Weight: 1}}}
		if p.One() != "a" {
			t.Errorf("%s: One() = %q, want the first key, leaving or not", mode, p.One())
		}
		for _, k := range []string{"a", "b", "c"} {
			if got := p.Runs(sts, k); got != (k == "a") {
				t.Errorf("%s: Runs(statefulsets, %s) = %v", mode, k, got)
			}
			if !p.Runs(dep, k) {
				t.Errorf("%s: deployments must run on every target", mode)
			}
		}
	}
	for gr, want := range map[schema.GroupResource]Spread{
		{Group: "batch", Resource: "jobs"}: SpreadOne, {Group: "batch", Resource: "cronjobs"}: SpreadOne, sts: SpreadOne,
		dep: SpreadReplicas, {Group: "apps", Resource: "daemonsets"}: SpreadCopies, {Resource: "persistentvolumeclaims"}: SpreadCopies,
		{Group: "autoscaling", Resource: "horizontalpodautoscalers"}: SpreadBounds,
	} {
		if got := SpreadOf(gr); got != want {
			t.Errorf("SpreadOf(%s) = %v, want %v", gr, got, want)
		}
	}
}

func TestBoundsShare(t *testing.T) {
	p := &NamespacePolicy{Mode: ModeDivide, Targets: map[string]TargetPolicy{"a": {Weight: 1}, "b": {Weight: 3}}}
	if lo, hi := p.BoundsShare(2, 8, "a"); lo != 1 || hi != 2 {
		t.Errorf("a: %d..%d, want 1..2", lo, hi)
	}
	if lo, hi := p.BoundsShare(2, 8, "b"); lo != 1 || hi != 6 { // 2 divides 1+1 (a tie goes to the first)
		t.Errorf("b: %d..%d, want 1..6", lo, hi)
	}
	if lo, hi := p.BoundsShare(1, 1, "a"); lo != 1 || hi != 1 {
		t.Errorf("never below 1: %d..%d", lo, hi)
	}
	p.Mode = ModeDuplicate
	if lo, hi := p.BoundsShare(2, 8, "a"); lo != 2 || hi != 8 {
		t.Errorf("Duplicate: %d..%d, want 2..8", lo, hi)
	}
}

func TestRoleBindingSynced(t *testing.T) {
	for _, c := range []struct {
		kind, name string
		want       bool
	}{{"Role", "anything", true}, {"ClusterRole", "view", true}, {"ClusterRole", "edit", false}, {"ClusterRole", "admin", false},
		{"ClusterRole", "cluster-admin", false}, {"ClusterRole", "my-tenant-role", false}, {"User", "x", false}} {
		if got, why := RoleBindingSynced(c.kind, c.name); got != c.want || (!got && why == "") {
			t.Errorf("RoleBindingSynced(%s, %s) = %v %q", c.kind, c.name, got, why)
		}
	}
}
