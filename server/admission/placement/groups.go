package placement

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kcpsql/kcp/schema/workload"
)

// maxGroups bounds spec.groups.
const maxGroups = 16

// ValidateGroups refuses spec.groups (an overflow division) that kcp would
// not honour as written: outside Divide mode, together with the fields that
// choose targets or weights another way, or with a group whose name or
// selector is missing, repeated or invalid.
func ValidateGroups(spec *workload.PlacementSpec) error {
	if len(spec.Groups) == 0 {
		return nil
	}
	if spec.Mode != workload.ModeDivide {
		return fmt.Errorf("spec.groups: an overflow division splits a Deployment's replicas, it needs mode Divide (mode is %q)", modeOrDefault(spec.Mode))
	}
	if len(spec.Groups) > maxGroups {
		return fmt.Errorf("spec.groups: at most %d groups, not %d", maxGroups, len(spec.Groups))
	}
	conflicts := []struct {
		set   bool
		field string
	}{
		{spec.NumberOfClusters != nil, "numberOfClusters"},
		{spec.AllClusters, "allClusters"},
		{spec.SpreadByLabel != "", "spreadByLabel"},
		{len(spec.Weights) > 0, "weights"},
		{spec.WeightsFrom != "" && spec.WeightsFrom != workload.WeightsStatic, "weightsFrom"},
		{spec.MinReplicasPerCluster > 0, "minReplicasPerCluster"},
	}
	for _, c := range conflicts {
		if c.set {
			return fmt.Errorf("spec.groups and spec.%s do not combine: with groups every usable target of every group runs the namespace and capacity decides the shares", c.field)
		}
	}
	seen := map[string]bool{}
	for i, g := range spec.Groups {
		if errs := validation.IsDNS1123Label(g.Name); len(errs) > 0 {
			return fmt.Errorf("spec.groups[%d].name %q: %s", i, g.Name, errs[0])
		}
		if seen[g.Name] {
			return fmt.Errorf("spec.groups[%d].name %q: two groups have this name", i, g.Name)
		}
		seen[g.Name] = true
		if g.Selector == nil || (len(g.Selector.MatchLabels) == 0 && len(g.Selector.MatchExpressions) == 0) {
			return fmt.Errorf("spec.groups[%d] (%s): an empty selector would match every target; give matchLabels or matchExpressions", i, g.Name)
		}
		if _, err := metav1.LabelSelectorAsSelector(g.Selector); err != nil {
			return fmt.Errorf("spec.groups[%d] (%s).selector: %v", i, g.Name, err)
		}
	}
	return nil
}

func modeOrDefault(mode string) string {
	if mode == "" {
		return workload.ModeDuplicate
	}
	return mode
}
