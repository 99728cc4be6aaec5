package workload

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// shares flattens a division: target key -> share.
func shares(gs []GroupShare) map[string]int32 {
	out := map[string]int32{}
	for _, g := range gs {
		for j, k := range g.Targets {
			out[k] = g.Shares[j]
		}
	}
	return out
}

func TestDivideOverflow(t *testing.T) {
	groups := []string{"on-prem", "cloud"}
	groupOf := map[string]string{"a": "on-prem", "b": "on-prem", "c": "cloud", "d": "cloud"}
	for _, tc := range []struct {
		name     string
		replicas int32
		capacity map[string]int32
		want     map[string]int32
	}{
		{"fits in the first group", 4, map[string]int32{"a": 4, "b": 4, "c": 100, "d": 100}, map[string]int32{"a": 2, "b": 2, "c": 0, "d": 0}},
		{"fills the first group exactly", 8, map[string]int32{"a": 4, "b": 4, "c": 100, "d": 100}, map[string]int32{"a": 4, "b": 4, "c": 0, "d": 0}},
		{"spills the rest", 11, map[string]int32{"a": 4, "b": 4, "c": 100, "d": 100}, map[string]int32{"a": 4, "b": 4, "c": 2, "d": 1}},
		{"by capacity within a group", 6, map[string]int32{"a": 1, "b": 5, "c": 100, "d": 100}, map[string]int32{"a": 1, "b": 5, "c": 0, "d": 0}},
		{"never above a target's capacity", 5, map[string]int32{"a": 1, "b": 5, "c": 100, "d": 100}, map[string]int32{"a": 1, "b": 4, "c": 0, "d": 0}},
		{"a full first group", 3, map[string]int32{"a": 0, "b": 0, "c": 100, "d": 100}, map[string]int32{"a": 0, "b": 0, "c": 2, "d": 1}},
		{"more than everything: the rest to the last group", 30, map[string]int32{"a": 4, "b": 4, "c": 5, "d": 5}, map[string]int32{"a": 4, "b": 4, "c": 11, "d": 11}},
		{"zero capacity everywhere: all to the last group, equally", 5, map[string]int32{}, map[string]int32{"a": 0, "b": 0, "c": 3, "d": 2}},
		{"zero replicas", 0, map[string]int32{"a": 4, "b": 4, "c": 100, "d": 100}, map[string]int32{"a": 0, "b": 0, "c": 0, "d": 0}},
		{"negative capacity counts as none", 2, map[string]int32{"a": -3, "b": 1, "c": 100, "d": 100}, map[string]int32{"a": 0, "b": 1, "c": 1, "d": 0}},
	} {
		got := shares(DivideOverflow(tc.replicas, groups, groupOf, tc.capacity))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: DivideOverflow(%d, %v) = %v, want %v", tc.name, tc.replicas, tc.capacity, got, tc.want)
		}
		var sum int32
		for _, v := range got {
			sum += v
		}
		if sum != tc.replicas {
			t.Errorf("%s: shares sum to %d, not %d", tc.name, sum, tc.replicas)
		}
	}
}

// Shrinking gives back the last group's replicas first: going down one
// replica at a time, the first group's share never drops while the next
// group has any.
func TestDivideOverflowShrinksInReverse(t *testing.T) {
	groups := []string{"on-prem", "cloud"}
	groupOf := map[string]string{"a": "on-prem", "c": "cloud"}
	capacity := map[string]int32{"a": 4, "c": 100}
	prev := shares(DivideOverflow(10, groups, groupOf, capacity))
	for r := int32(9); r >= 0; r-- {
		got := shares(DivideOverflow(r, groups, groupOf, capacity))
		if prev["c"] > 0 && got["a"] != prev["a"] {
			t.Fatalf("at %d replicas on-prem went from %d to %d while cloud still had %d", r, prev["a"], got["a"], prev["c"])
		}
		if got["c"] > 0 && got["a"] < capacity["a"] {
			t.Fatalf("at %d replicas cloud has %d while on-prem has room (%d of %d)", r, got["c"], got["a"], capacity["a"])
		}
		prev = got
	}
	if prev["a"] != 0 || prev["c"] != 0 {
		t.Fatalf("at 0 replicas: %v", prev)
	}
}

// A group without targets is skipped; the last group that has targets takes
// the surplus.
func TestDivideOverflowEmptyGroup(t *testing.T) {
	got := DivideOverflow(7, []string{"on-prem", "cloud", "burst"}, map[string]string{"a": "on-prem", "c": "cloud"}, map[string]int32{"a": 2, "c": 3})
	if s := shares(got); s["a"] != 2 || s["c"] != 5 {
		t.Fatalf("got %v", s)
	}
	if msg := OverflowMessage(got); !strings.Contains(msg, "burst: no target") || !strings.Contains(msg, "on-prem: 2 (room for 2), full") {
		t.Fatalf("message %q", msg)
	}
}

func TestCapacityFor(t *testing.T) {
	q := resource.MustParse
	free := corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("4Gi"), corev1.ResourcePods: q("110")}
	for _, tc := range []struct {
		name       string
		free       corev1.ResourceList
		perReplica corev1.ResourceList
		want       int32
	}{
		{"cpu bound", free, corev1.ResourceList{corev1.ResourceCPU: q("500m"), corev1.ResourcePods: q("1")}, 4},
		{"memory bound", free, corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("1Gi"), corev1.ResourcePods: q("1")}, 4},
		{"no requests: pods bound", free, corev1.ResourceList{corev1.ResourcePods: q("1")}, 110},
		{"nothing free", corev1.ResourceList{corev1.ResourceCPU: q("-1"), corev1.ResourcePods: q("3")}, corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourcePods: q("1")}, 0},
		{"a resource the target lacks", free, corev1.ResourceList{"example.com/gpu": q("1"), corev1.ResourcePods: q("1")}, 0},
		{"a zero request does not bound", free, corev1.ResourceList{corev1.ResourceCPU: q("0"), corev1.ResourcePods: q("1")}, 110},
	} {
		if got := CapacityFor(tc.free, tc.perReplica); got != tc.want {
			t.Errorf("%s: CapacityFor = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestReplicaRequests(t *testing.T) {
	q := resource.MustParse
	spec := corev1.PodSpec{
		Containers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("200m")}}},
			{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("300m"), corev1.ResourceMemory: q("64Mi")}}},
		},
		InitContainers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("1Mi")}}},
		},
	}
	got := ReplicaRequests(&spec)
	cpu, mem, pods := got[corev1.ResourceCPU], got[corev1.ResourceMemory], got[corev1.ResourcePods]
	if cpu.MilliValue() != 1000 || mem.Value() != 64<<20 || pods.Value() != 1 {
		t.Fatalf("got %v", got)
	}
}

// Every syncer computes the division from the same policy and object, so
// every target's share is the same wherever it is computed, and the shares
// add up: here each target's share is computed from its own copy of the
// policy (decoded from the annotation, as each syncer does) and of the
// object, in a different order of map iteration each time.
func TestShareOfDeterministicAcrossSyncers(t *testing.T) {
	pol := NamespacePolicy{Mode: ModeDivide, Groups: []string{"on-prem", "cloud"}, Targets: map[string]TargetPolicy{}}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourcePods: resource.MustParse("110")}
	for _, k := range []string{"k1", "k2", "k3"} {
		pol.Targets[k] = TargetPolicy{Name: "root:compute/" + k, Group: "on-prem", Allocatable: alloc}
	}
	pol.Targets["k4"] = TargetPolicy{Name: "root:compute/k4", Group: "cloud", Allocatable: alloc}
	pol.Targets["k5"] = TargetPolicy{Name: "root:compute/k5", Group: "cloud", Leaving: true}
	raw, _ := json.Marshal(pol)
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"spec": map[string]interface{}{"replicas": int64(17), "template": map[string]interface{}{"spec": map[string]interface{}{
			"containers": []interface{}{map[string]interface{}{"name": "c", "resources": map[string]interface{}{"requests": map[string]interface{}{"cpu": "500m"}}}},
		}}},
	}}
	three := int32(3)
	st, _ := json.Marshal(ShareStatus{Mode: ModeDivide, Capacity: &three})
	unreachable, _ := json.Marshal(ShareStatus{Mode: ModeDivide, Capacity: &three, Unreachable: "heartbeat stopped"})
	obj.SetAnnotations(map[string]string{StatusAnnotationPrefix + "k1": string(st), StatusAnnotationPrefix + "k3": string(unreachable)})
	want := map[string]int32{"k1": 3, "k2": 4, "k3": 0, "k4": 10, "k5": 0}
	for round := 0; round < 20; round++ {
		var sum int32
		for k, w := range want {
			var mine NamespacePolicy
			if err := json.Unmarshal(raw, &mine); err != nil {
				t.Fatal(err)
			}
			got := mine.ShareOf(obj.DeepCopy(), k)
			if got != w {
				t.Fatalf("round %d: share of %s = %d, want %d", round, k, got, w)
			}
			sum += got
		}
		if sum != 17 {
			t.Fatalf("shares add up to %d", sum)
		}
	}
	// Without groups ShareOf is the weights division.
	pol.Groups = nil
	if got := pol.ShareOf(obj, "k1"); got != pol.Share(17, "k1") {
		t.Fatalf("no groups: %d", got)
	}
}

func TestSpilled(t *testing.T) {
	groupOf := map[string]string{"a": "on-prem", "c": "cloud"}
	capacity := map[string]int32{"a": 4, "c": 100}
	if Spilled(DivideOverflow(4, []string{"on-prem", "cloud"}, groupOf, capacity)) {
		t.Error("4 fit on-prem")
	}
	if !Spilled(DivideOverflow(5, []string{"on-prem", "cloud"}, groupOf, capacity)) {
		t.Error("5 do not")
	}
	// The first group has no target: the cloud is the first with one.
	if Spilled(DivideOverflow(5, []string{"edge", "on-prem", "cloud"}, map[string]string{"a": "on-prem", "c": "cloud"}, map[string]int32{"a": 10})) {
		t.Error("an empty first group")
	}
}
