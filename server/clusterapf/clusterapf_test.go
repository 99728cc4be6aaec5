package clusterapf

import (
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
)

// TestRootConfig: root's objects for tenants are what the package comment
// says: kcp-tenant-lists before kcp-tenants, matching its group's lists
// only, with a flow per tenant, neither lending nor borrowing, and shares
// for at least WideListSeats seats per two CPUs next to the 275 shares of
// the other levels (600 seats in all).
func TestRootConfig(t *testing.T) {
	pls, fss := RootConfig()
	if len(pls) != 2 || len(fss) != 2 || pls[0].Name != TenantsName || pls[1].Name != TenantListsName {
		t.Fatalf("levels %v", pls)
	}
	tenants, lists := fss[0], fss[1]
	if lists.Spec.MatchingPrecedence >= tenants.Spec.MatchingPrecedence {
		t.Errorf("kcp-tenant-lists (%d) must match before kcp-tenants (%d)", lists.Spec.MatchingPrecedence, tenants.Spec.MatchingPrecedence)
	}
	r := lists.Spec.Rules[0]
	if r.Subjects[0].Group.Name != TenantListsGroup || len(r.ResourceRules) != 1 || r.ResourceRules[0].Verbs[0] != "list" || len(r.NonResourceRules) != 0 {
		t.Errorf("kcp-tenant-lists rules: %+v", r)
	}
	if tenants.Spec.Rules[0].Subjects[0].Group.Name != TenantsGroup || len(tenants.Spec.Rules[0].NonResourceRules) != 1 {
		t.Errorf("kcp-tenants rules: %+v", tenants.Spec.Rules[0])
	}
	for _, fs := range fss {
		if fs.Spec.DistinguisherMethod.Type != flowcontrolv1.FlowDistinguisherMethodByUserType || fs.Spec.PriorityLevelConfiguration.Name != fs.Name {
			t.Errorf("%s: %+v", fs.Name, fs.Spec)
		}
	}
	l := pls[1].Spec.Limited
	if *l.LendablePercent != 0 || *l.BorrowingLimitPercent != 0 || l.LimitResponse.Queuing.HandSize != 1 {
		t.Errorf("kcp-tenant-lists level: %+v", l)
	}
	if q := pls[0].Spec.Limited.LimitResponse.Queuing; q.Queues != 256 || q.HandSize != 6 {
		t.Errorf("kcp-tenants queuing: %+v", q)
	}
	for _, cpus := range []int{1, 2, 4, 16, 64} {
		shares := wideListShares(cpus)
		seats := (600*int(shares) + 275 + int(shares) - 1) / (275 + int(shares)) // upstream rounds up
		if want := WideListSeats * max(1, cpus/2); seats < want || seats > want+3*max(1, cpus/2) {
			t.Errorf("%d CPUs: %d shares give %d seats, want about %d", cpus, shares, seats, want)
		}
	}
}
