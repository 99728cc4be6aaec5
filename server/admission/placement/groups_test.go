package placement

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

func TestValidateGroups(t *testing.T) {
	onprem := &metav1.LabelSelector{MatchLabels: map[string]string{"site": "onprem"}}
	cloud := &metav1.LabelSelector{MatchLabels: map[string]string{"site": "cloud"}}
	two := int32(2)
	good := func() workload.PlacementSpec {
		return workload.PlacementSpec{Mode: workload.ModeDivide, Groups: []workload.TargetGroup{{Name: "on-prem", Selector: onprem}, {Name: "cloud", Selector: cloud}}}
	}
	for _, tc := range []struct {
		name   string
		change func(*workload.PlacementSpec)
		want   string
	}{
		{"valid", func(*workload.PlacementSpec) {}, ""},
		{"no groups at all", func(s *workload.PlacementSpec) { s.Groups, s.Mode = nil, "" }, ""},
		{"Duplicate", func(s *workload.PlacementSpec) { s.Mode = workload.ModeDuplicate }, "needs mode Divide"},
		{"no mode", func(s *workload.PlacementSpec) { s.Mode = "" }, `needs mode Divide (mode is "Duplicate")`},
		{"numberOfClusters", func(s *workload.PlacementSpec) { s.NumberOfClusters = &two }, "spec.numberOfClusters do not combine"},
		{"allClusters", func(s *workload.PlacementSpec) { s.AllClusters = true }, "spec.allClusters do not combine"},
		{"spreadByLabel", func(s *workload.PlacementSpec) { s.SpreadByLabel = "region" }, "spec.spreadByLabel do not combine"},
		{"weights", func(s *workload.PlacementSpec) { s.Weights = []workload.TargetWeight{{Weight: 2}} }, "spec.weights do not combine"},
		{"weightsFrom Capacity", func(s *workload.PlacementSpec) { s.WeightsFrom = workload.WeightsCapacity }, "spec.weightsFrom do not combine"},
		{"weightsFrom Static", func(s *workload.PlacementSpec) { s.WeightsFrom = workload.WeightsStatic }, ""},
		{"minReplicasPerCluster", func(s *workload.PlacementSpec) { s.MinReplicasPerCluster = 1 }, "spec.minReplicasPerCluster do not combine"},
		{"no name", func(s *workload.PlacementSpec) { s.Groups[1].Name = "" }, "spec.groups[1].name"},
		{"a bad name", func(s *workload.PlacementSpec) { s.Groups[0].Name = "On Prem" }, "spec.groups[0].name"},
		{"a name twice", func(s *workload.PlacementSpec) { s.Groups[1].Name = "on-prem" }, "two groups have this name"},
		{"no selector", func(s *workload.PlacementSpec) { s.Groups[0].Selector = nil }, "empty selector"},
		{"an empty selector", func(s *workload.PlacementSpec) { s.Groups[0].Selector = &metav1.LabelSelector{} }, "empty selector"},
		{"a bad operator", func(s *workload.PlacementSpec) {
			s.Groups[0].Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "site", Operator: "Near"}}}
		}, "spec.groups[0] (on-prem).selector"},
		{"too many", func(s *workload.PlacementSpec) {
			for len(s.Groups) <= maxGroups {
				s.Groups = append(s.Groups, workload.TargetGroup{Name: "g" + strings.Repeat("x", len(s.Groups)), Selector: cloud})
			}
		}, "at most 16 groups"},
	} {
		spec := good()
		tc.change(&spec)
		err := ValidateGroups(&spec)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: want an error with %q, got %v", tc.name, tc.want, err)
		}
	}
}
