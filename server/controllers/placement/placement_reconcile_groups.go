package placement

import (
	"github.com/kcpsql/kcp/schema/workload"
)

// Ordered groups of SyncTargets (Placement spec.groups): an overflow
// division. A namespace runs on every usable target of every group
// (PlacementSpec.Wanted); the namespace policy names the groups in order
// and gives each target its group and allocatable resources; each
// target's syncer divides a Deployment's replicas from that and the
// capacities the syncers report (schema/workload/overflow.go).

// inAGroup reports whether a target belongs to one of the Placement's
// groups (always true for a Placement without groups).
func inAGroup(p *workload.Placement, t *workload.SyncTarget) bool {
	if len(p.Spec.Groups) == 0 {
		return true
	}
	_, ok := p.Spec.GroupOf(t.Labels)
	return ok
}

// groupPolicy adds the groups to a namespace policy in Divide mode.
func groupPolicy(p *workload.Placement, chosen []target, out *workload.NamespacePolicy) {
	if len(p.Spec.Groups) == 0 || out.Mode != workload.ModeDivide {
		return
	}
	for _, g := range p.Spec.Groups {
		out.Groups = append(out.Groups, g.Name)
	}
	for _, t := range chosen {
		key := workload.TargetKey(string(t.location), t.obj.Name)
		tp := out.Targets[key]
		if i, ok := p.Spec.GroupOf(t.obj.Labels); ok {
			tp.Group = p.Spec.Groups[i].Name
		}
		tp.Allocatable = t.obj.Status.Allocatable.DeepCopy()
		out.Targets[key] = tp
	}
}

// groupStatus is spec.groups with the selected targets each holds.
func groupStatus(p *workload.Placement, selected []target) []workload.GroupStatus {
	if len(p.Spec.Groups) == 0 {
		return nil
	}
	out := make([]workload.GroupStatus, len(p.Spec.Groups))
	for i, g := range p.Spec.Groups {
		out[i] = workload.GroupStatus{Name: g.Name, Targets: []string{}}
	}
	for _, t := range selected {
		if i, ok := p.Spec.GroupOf(t.obj.Labels); ok {
			out[i].Targets = append(out[i].Targets, t.ref())
		}
	}
	return out
}
