package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

// TestGroupPolicy: with spec.groups the namespace policy names the groups
// in order and gives each target its group (the first that selects it) and
// allocatable resources; a target no group selects is not used; a change
// of targets starts no weights rebalancing.
func TestGroupPolicy(t *testing.T) {
	mk := func(name, site string) target {
		st := &workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"site": site, "tier": "prod"}}}
		st.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
		return target{location: "root:compute", obj: st}
	}
	a, b, c := mk("a", "onprem"), mk("b", "cloud"), mk("c", "edge")
	p := &workload.Placement{Spec: workload.PlacementSpec{Mode: workload.ModeDivide, Groups: []workload.TargetGroup{
		{Name: "on-prem", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"site": "onprem"}}},
		{Name: "cloud", Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}}},
	}}}
	if !inAGroup(p, a.obj) || !inAGroup(p, c.obj) || inAGroup(p, &workload.SyncTarget{}) {
		t.Fatal("inAGroup")
	}
	pol := policy(p, []target{a, b}, nil)
	ka, kb := workload.TargetKey("root:compute", "a"), workload.TargetKey("root:compute", "b")
	if !pol.Overflow() || len(pol.Groups) != 2 || pol.Groups[0] != "on-prem" || pol.Targets[ka].Group != "on-prem" || pol.Targets[kb].Group != "cloud" {
		t.Fatalf("policy: %+v", pol)
	}
	if cpu := pol.Targets[ka].Allocatable[corev1.ResourceCPU]; cpu.String() != "2" {
		t.Fatalf("allocatable: %v", pol.Targets[ka].Allocatable)
	}
	old := policy(p, []target{a}, nil)
	if from := rebalancingFrom(&old, &pol); from != nil {
		t.Fatalf("a weights rebalancing for an overflow division: %v", from)
	}
	if got := groupStatus(p, []target{a, b, c}); len(got) != 2 || len(got[0].Targets) != 1 || len(got[1].Targets) != 2 {
		t.Fatalf("status: %+v", got)
	}
	if (&p.Spec).Wanted(3) != 3 {
		t.Fatal("groups use every target")
	}
}
