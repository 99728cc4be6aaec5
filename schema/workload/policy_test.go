package workload

import (
	"fmt"
	"slices"
	"testing"
	"testing/quick"
)

func TestDivide(t *testing.T) {
	for _, tc := range []struct {
		replicas int32
		weights  []int64
		minimum  int32
		want     []int32
	}{
		{6, []int64{1, 1, 1}, 0, []int32{2, 2, 2}},
		{7, []int64{1, 1, 1}, 0, []int32{3, 2, 2}},           // remainder to the first on a tie
		{8, []int64{1, 1, 1}, 0, []int32{3, 3, 2}},           // and then the next
		{6, []int64{2, 1}, 0, []int32{4, 2}},                 // static weights
		{10, []int64{4000, 2000, 2000}, 0, []int32{5, 3, 2}}, // capacity: 5, 2.5, 2.5; tie to the earlier
		{6, []int64{1, 0}, 0, []int32{6, 0}},                 // a zero weight gets nothing
		{6, []int64{1, 0}, 1, []int32{5, 1}},                 // unless a minimum is set
		{2, []int64{1, 1, 1}, 1, []int32{1, 1, 0}},           // not enough replicas for every minimum
		{6, []int64{0, 0}, 0, []int32{3, 3}},                 // all zero: equal
		{0, []int64{1, 1}, 0, []int32{0, 0}},
		{-3, []int64{1, 1}, 0, []int32{0, 0}},
		{5, nil, 0, []int32{}},
		{3, []int64{-5, 1}, 0, []int32{0, 3}},
	} {
		got := Divide(tc.replicas, tc.weights, tc.minimum)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Divide(%d, %v, min %d) = %v, want %v", tc.replicas, tc.weights, tc.minimum, got, tc.want)
		}
	}
}

// FuzzDivide: shares always sum to the replicas, never go negative, honour
// the minimum while replicas last, and are as even as the weights allow
// (each within one replica of its exact proportion of what the minimums
// left).
func FuzzDivide(f *testing.F) {
	f.Add(int32(6), int64(1), int64(1), int64(1), int32(0))
	f.Add(int32(101), int64(7), int64(0), int64(13), int32(2))
	f.Add(int32(1), int64(0), int64(0), int64(0), int32(5))
	f.Fuzz(func(t *testing.T, replicas int32, a, b, c int64, minimum int32) {
		replicas %= 100000
		minimum %= 1000
		a, b, c = a%1000000, b%1000000, c%1000000
		weights := []int64{a, b, c}
		shares := Divide(replicas, weights, minimum)
		var sum int32
		for _, s := range shares {
			if s < 0 {
				t.Fatalf("negative share: %v", shares)
			}
			sum += s
		}
		want := max(replicas, 0)
		if sum != want {
			t.Fatalf("Divide(%d, %v, %d) = %v sums to %d", replicas, weights, minimum, shares, sum)
		}
		if minimum > 0 && replicas >= minimum*int32(len(weights)) {
			for _, s := range shares {
				if s < minimum {
					t.Fatalf("Divide(%d, %v, %d) = %v: a share under the minimum", replicas, weights, minimum, shares)
				}
			}
		}
		if minimum <= 0 && replicas > 0 {
			var total int64
			for _, w := range weights {
				total += max(w, 0)
			}
			allZero := total == 0
			if allZero {
				total = int64(len(weights))
			}
			for i, w := range weights {
				w = max(w, 0)
				if allZero {
					w = 1
				}
				exact := float64(replicas) * float64(w) / float64(total)
				if d := float64(shares[i]) - exact; d <= -1 || d >= 1 {
					t.Fatalf("Divide(%d, %v) = %v: share %d is %v from its proportion", replicas, weights, shares, i, d)
				}
			}
		}
		// Deterministic.
		if again := Divide(replicas, weights, minimum); !slices.Equal(again, shares) {
			t.Fatalf("not deterministic: %v then %v", shares, again)
		}
	})
}

func TestPolicyShare(t *testing.T) {
	p := &NamespacePolicy{Mode: ModeDivide, Targets: map[string]TargetPolicy{"b": {Weight: 1}, "a": {Weight: 2}}}
	if a, b := p.Share(6, "a"), p.Share(6, "b"); a != 4 || b != 2 {
		t.Errorf("Share(6) = %d, %d; want 4, 2", a, b)
	}
	if s := p.Share(6, "c"); s != 0 {
		t.Errorf("an unassigned target's share = %d", s)
	}
	var none *NamespacePolicy
	if s := none.Share(6, "a"); s != 6 {
		t.Errorf("no policy: %d", s)
	}
	p.Mode = ModeDuplicate
	if s := p.Share(6, "b"); s != 6 {
		t.Errorf("Duplicate: %d", s)
	}
}

// TestRebalancingShare: while Previous is set, a target runs the larger of
// its shares before and after, so nothing shrinks before what grows is
// there; a target no longer assigned gets nothing from Previous.
func TestRebalancingShare(t *testing.T) {
	// a and b ran 3 and 3; c joined with the same weight: 2, 2, 2 after.
	p := &NamespacePolicy{Mode: ModeDivide, Targets: map[string]TargetPolicy{"a": {Weight: 1}, "b": {Weight: 1}, "c": {Weight: 1}},
		Previous: []map[string]int64{{"a": 1, "b": 1}}}
	var got []int32
	for _, k := range []string{"a", "b", "c"} {
		got = append(got, p.Share(6, k), p.TargetShare(6, k))
	}
	if fmt.Sprint(got) != "[3 2 3 2 2 2]" {
		t.Errorf("join: Share/TargetShare of a, b, c = %v", got)
	}
	// b's weight doubled (capacity) while d, assigned before, is gone.
	p = &NamespacePolicy{Mode: ModeDivide, Targets: map[string]TargetPolicy{"a": {Weight: 1}, "b": {Weight: 2}},
		Previous: []map[string]int64{{"a": 1, "b": 1, "d": 1}}}
	if a, b, d := p.Share(6, "a"), p.Share(6, "b"), p.Share(6, "d"); a != 2 || b != 4 || d != 0 {
		t.Errorf("capacity change: a %d b %d d %d, want 2 4 0", a, b, d)
	}
	// A failover (d's share went to a and b) and d's return before that
	// rebalancing ended: a and b keep what they run now until d runs its
	// share again.
	p = &NamespacePolicy{Mode: ModeDivide, Targets: map[string]TargetPolicy{"a": {Weight: 1}, "b": {Weight: 1}, "d": {Weight: 1}},
		Previous: []map[string]int64{{"a": 1, "b": 1, "d": 1}, {"a": 1, "b": 1}}}
	if a, b, d := p.Share(6, "a"), p.Share(6, "b"), p.Share(6, "d"); a != 3 || b != 3 || d != 2 {
		t.Errorf("return during a failover: a %d b %d d %d, want 3 3 2", a, b, d)
	}
	p.Targets["b"] = TargetPolicy{Weight: 2}
	// A leaving target keeps what it runs by other means (its syncer
	// leaves it as it is): no share from Previous either.
	p.Targets["a"] = TargetPolicy{Leaving: true}
	if a := p.Share(6, "a"); a != 0 {
		t.Errorf("leaving: %d", a)
	}
	// The shares during a rebalancing never sum to less than the replicas.
	f := func(replicas uint8, w1, w2, w3, p1, p2 uint8) bool {
		p := &NamespacePolicy{Mode: ModeDivide, Targets: map[string]TargetPolicy{"a": {Weight: int64(w1)}, "b": {Weight: int64(w2)}, "c": {Weight: int64(w3)}},
			Previous: []map[string]int64{{"a": int64(p1), "b": int64(p2)}, {"c": int64(p2)}}}
		var sum int32
		for _, k := range []string{"a", "b", "c"} {
			if p.Share(int32(replicas), k) < p.TargetShare(int32(replicas), k) {
				return false
			}
			sum += p.Share(int32(replicas), k)
		}
		return sum >= int32(replicas)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}

// TestCheckOverridePatch: overrides change spec and the object's own
// labels and annotations, never what the syncer identifies its copies by.
func TestCheckOverridePatch(t *testing.T) {
	for patch, ok := range map[string]bool{
		`{"spec":{"replicas":2}}`: true,
		`{"metadata":{"labels":{"tier":"eu"},"annotations":{"note":"x"}},"spec":{}}`:     true,
		`{"metadata":{"name":"other"}}`:                                                  false,
		`{"metadata":{"namespace":"kube-system"}}`:                                       false,
		`{"kind":"ClusterRoleBinding"}`:                                                  false,
		`{"apiVersion":"rbac.authorization.k8s.io/v1"}`:                                  false,
		`{"status":{"replicas":9}}`:                                                      false,
		`{"metadata":{"labels":{"workload.kcp.io/sync-target":null}}}`:                   false,
		`{"metadata":{"annotations":{"workload.kcp.io/upstream-cluster":"root:other"}}}`: false,
		`{"metadata":{"labels":{"state.workload.kcp.io/abc":"Sync"}}}`:                   false,
		`{"metadata":{"annotations":{"kcp.io/cluster":"root:other"}}}`:                   false,
		`{"metadata":{"finalizers":["x"]}}`:                                              false,
		`[1]`:                                                                            false,
		// Issue 49: directives and nulls that drop kcp's keys without
		// naming them, keys twice.
		`{"metadata":{"labels":{"$patch":"replace","tier":"eu"}}}`:                         false,
		`{"metadata":{"annotations":{"$patch":"delete"}}}`:                                 false,
		`{"metadata":{"labels":{"$retainKeys":["tier"]}}}`:                                 false,
		`{"metadata":{"$setElementOrder/labels":[]}}`:                                      false,
		`{"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]}}`:                       false,
		`{"metadata":{"$patch":"replace","labels":{}}}`:                                    false,
		`{"$patch":"replace","spec":{}}`:                                                   false,
		`{"metadata":{"labels":null}}`:                                                     false,
		`{"metadata":{"annotations":null}}`:                                                false,
		`{"metadata":null}`:                                                                false,
		`{"metadata":{"labels":["x"]}}`:                                                    false,
		`{"metadata":{"labels":{"tier":"eu"}},"metadata":{"labels":{"$patch":"replace"}}}`: false,
		`{"metadata":{"labels":{"tier":"eu","tier":"us"}}}`:                                false,
		`{"metadata":{"labels":{"tier":null}}}`:                                            true,
		`{"Metadata":{"labels":{"$patch":"replace"}}}`:                                     false,
		`{"spec":{"template":{"spec":{"containers":[{"name":"web","$patch":"delete"}]}}}}`: true,
	} {
		if err := CheckOverridePatch([]byte(patch)); (err == nil) != ok {
			t.Errorf("CheckOverridePatch(%s) = %v, want ok=%v", patch, err, ok)
		}
	}
}
