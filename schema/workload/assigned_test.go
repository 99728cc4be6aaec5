package workload

import (
	"reflect"
	"testing"
)

func TestAssignedTargets(t *testing.T) {
	a, b, c := TargetKey("root:compute", "pc1"), TargetKey("root:compute", "pc2"), TargetKey("root:compute", "pc3")
	labels := map[string]string{StateLabelPrefix + a: StateSync, StateLabelPrefix + b: StateSync, StateLabelPrefix + c: "Other"}
	ann := map[string]string{AssignedTargetAnnotation: "root:compute/pc2, root:compute/pc1,root:compute/pc3,root:compute/pc1,broken"}
	want := []AssignedTarget{{Location: "root:compute", Name: "pc2", Key: b}, {Location: "root:compute", Name: "pc1", Key: a}}
	if got := AssignedTargets(labels, ann); !reflect.DeepEqual(got, want) {
		t.Errorf("AssignedTargets: %+v, want %+v", got, want)
	}
	if got := AssignedTargets(labels, nil); got != nil {
		t.Errorf("no annotation: %+v", got)
	}
}
