package workload

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// Overflow division: a Placement with spec.groups divides a Deployment's
// replicas by groups in order of preference. Each target of the namespace
// belongs to one group; a target's capacity for a Deployment is how many
// replicas of it the target can hold: its allocatable CPU, memory and pods
// minus what the pods bound to its nodes request, not counting the
// Deployment's own pods there (they are its to keep, so a target does not
// spill what it already runs: no oscillation), divided by what one replica
// requests (CapacityFor). Each target's syncer reports that number in its
// status annotation of the Deployment (ShareStatus.Capacity), and every
// syncer divides from those same annotations, so they agree:
//
//   - the first group takes min(replicas, the sum of its targets'
//     capacities), split between its targets in proportion to their
//     capacities (Divide, largest remainder: no target gets more than it
//     can hold); the rest goes to the next group the same way;
//   - replicas beyond what every group can hold go to the last group that
//     has targets, on top of its capacities, equally between its targets
//     (the pods wait there for room: the last group is the one to grow);
//   - shrinking undoes it in reverse: the last group's replicas go first.
//
// A target that has not reported its capacity for the Deployment yet (it
// just joined, or the Deployment is new) counts with its allocatable
// resources as the policy has them (TargetPolicy.Allocatable): preferred
// groups are filled first until their syncers know better. An
// Unreachable target (heartbeat stopped) counts with capacity 0.

// labelSet adapts a label map.
func labelSet(m map[string]string) labels.Set { return labels.Set(m) }

// Overflow reports whether the policy divides by groups.
func (p *NamespacePolicy) Overflow() bool {
	return p != nil && p.Mode == ModeDivide && len(p.Groups) > 0
}

// ReplicaRequests is what one replica of a pod template requests, as the
// scheduler counts it: the sum of its containers' requests, at least each
// init container's, plus the pod overhead; and one pod. A template
// without CPU or memory requests is bounded by the pods a target can hold.
func ReplicaRequests(spec *corev1.PodSpec) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	for _, c := range spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if cur, ok := out[name]; !ok || q.Cmp(cur) > 0 {
				out[name] = q.DeepCopy()
			}
		}
	}
	for name, q := range spec.Overhead {
		sum := out[name]
		sum.Add(q)
		out[name] = sum
	}
	out[corev1.ResourcePods] = resource.MustParse("1")
	return out
}

// CapacityFor is how many replicas requesting perReplica fit in free: the
// least over the resources a replica requests (more than zero of) of
// free / request, 0 when free lacks one or has none left.
func CapacityFor(free, perReplica corev1.ResourceList) int32 {
	best := int64(-1)
	names := make([]string, 0, len(perReplica))
	for name := range perReplica {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		req := perReplica[corev1.ResourceName(n)]
		if req.Sign() <= 0 {
			continue
		}
		have, ok := free[corev1.ResourceName(n)]
		if !ok || have.Sign() <= 0 {
			return 0
		}
		var fit int64
		if req.MilliValue() < 1<<52 && have.MilliValue() < 1<<52 {
			fit = have.MilliValue() / max(req.MilliValue(), 1)
		} else {
			fit = have.Value() / max(req.Value(), 1)
		}
		if best < 0 || fit < best {
			best = fit
		}
	}
	if best < 0 {
		// Nothing requested at all (not even a pod): no bound.
		return 1 << 30
	}
	return int32(min(best, 1<<30))
}

// GroupShare is what one group gets of a Deployment in an overflow
// division.
type GroupShare struct {
	Name string
	// Replicas is the group's part; Capacity the sum of its targets'
	// capacities for the Deployment.
	Replicas, Capacity int32
	// Targets are its targets' keys, in key order, with their shares.
	Targets []string
	Shares  []int32
}

// DivideOverflow divides replicas by groups in order (see above): groups
// are the group names in order, groupOf each target key's group name and
// capacity each target key's capacity. Targets in no listed group get
// nothing. The shares add up to replicas when any group has a target.
func DivideOverflow(replicas int32, groups []string, groupOf map[string]string, capacity map[string]int32) []GroupShare {
	out := make([]GroupShare, len(groups))
	index := map[string]int{}
	for i, g := range groups {
		out[i].Name = g
		index[g] = i
	}
	keys := make([]string, 0, len(groupOf))
	for k := range groupOf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	last := -1
	for _, k := range keys {
		if i, ok := index[groupOf[k]]; ok {
			out[i].Targets = append(out[i].Targets, k)
			out[i].Capacity += max(capacity[k], 0)
			last = max(last, i)
		}
	}
	left := max(replicas, 0)
	for i := range out {
		g := &out[i]
		g.Shares = make([]int32, len(g.Targets))
		if len(g.Targets) == 0 {
			continue
		}
		take := min(left, g.Capacity)
		if i == last {
			take = left
		}
		caps := make([]int64, len(g.Targets))
		for j, k := range g.Targets {
			caps[j] = int64(max(capacity[k], 0))
		}
		if take <= g.Capacity {
			if take > 0 {
				g.Shares = Divide(take, caps, 0)
			}
		} else {
			// More than the last group holds: each target gets what it
			// can hold, the surplus equally.
			extra := Divide(take-g.Capacity, make([]int64, len(g.Targets)), 0)
			for j := range g.Shares {
				g.Shares[j] = int32(caps[j]) + extra[j]
			}
		}
		g.Replicas = take
		left -= take
	}
	return out
}

// Overflowed is the division of a Deployment (its object, as the syncers
// and kcp see it, with the targets' status annotations) under an overflow
// policy.
func (p *NamespacePolicy) Overflowed(obj *unstructured.Unstructured) []GroupShare {
	replicas, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	perReplica := TemplateRequests(obj)
	groupOf, capacity := map[string]string{}, map[string]int32{}
	for k, t := range p.Targets {
		if t.Leaving {
			continue
		}
		groupOf[k] = t.Group
		capacity[k] = CapacityFor(t.Allocatable, perReplica)
		if raw, ok := obj.GetAnnotations()[StatusAnnotationPrefix+k]; ok {
			var s ShareStatus
			if json.Unmarshal([]byte(raw), &s) == nil {
				switch {
				case s.Unreachable != "":
					capacity[k] = 0
				case s.Capacity != nil:
					capacity[k] = *s.Capacity
				}
			}
		}
	}
	return DivideOverflow(int32(replicas), p.Groups, groupOf, capacity)
}

// TemplateRequests is ReplicaRequests of a Deployment's pod template
// (a template that does not decode requests nothing but a pod).
func TemplateRequests(obj *unstructured.Unstructured) corev1.ResourceList {
	var spec corev1.PodSpec
	if raw, found, _ := unstructured.NestedMap(obj.Object, "spec", "template", "spec"); found {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
			spec = corev1.PodSpec{}
		}
	}
	return ReplicaRequests(&spec)
}

// ShareOf is target key's share of a Deployment (or an object with
// spec.replicas) under the policy: the overflow division for a policy with
// groups, Share otherwise.
func (p *NamespacePolicy) ShareOf(obj *unstructured.Unstructured, key string) int32 {
	if !p.Overflow() {
		replicas, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		if !found {
			replicas = 1
		}
		return p.Share(int32(replicas), key)
	}
	for _, g := range p.Overflowed(obj) {
		for j, k := range g.Targets {
			if k == key {
				return g.Shares[j]
			}
		}
	}
	return 0
}

// OverflowMessage says, for people, how the division went: each group's
// replicas and capacity, and why replicas spilled.
func OverflowMessage(groups []GroupShare) string {
	var parts []string
	for i, g := range groups {
		switch {
		case len(g.Targets) == 0:
			parts = append(parts, fmt.Sprintf("%s: no target", g.Name))
		default:
			parts = append(parts, fmt.Sprintf("%s: %d (room for %d)", g.Name, g.Replicas, g.Capacity))
		}
		if len(g.Targets) > 0 && g.Replicas >= g.Capacity && i < len(groups)-1 && restHasReplicas(groups[i+1:]) {
			parts[len(parts)-1] += ", full: the rest spills to the next group"
		}
	}
	return strings.Join(parts, "; ")
}

// Spilled reports whether a division runs replicas beyond the first group
// that has targets.
func Spilled(groups []GroupShare) bool {
	for i, g := range groups {
		if len(g.Targets) > 0 {
			return restHasReplicas(groups[i+1:])
		}
	}
	return false
}

func restHasReplicas(gs []GroupShare) bool {
	for _, g := range gs {
		if g.Replicas > 0 {
			return true
		}
	}
	return false
}

// ParseShareStatus decodes a status annotation (StatusAnnotationPrefix +
// key).
func ParseShareStatus(annotation string) (ShareStatus, error) {
	var s ShareStatus
	err := json.Unmarshal([]byte(annotation), &s)
	return s, err
}
