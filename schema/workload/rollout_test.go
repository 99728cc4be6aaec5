package workload

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestRolloutGroupSize(t *testing.T) {
	for _, row := range []struct {
		mc   *intstr.IntOrString
		n    int
		want int
		err  string
	}{
		{nil, 3, 1, ""},
		{ptr(intstr.FromInt32(2)), 3, 2, ""},
		{ptr(intstr.FromString("34%")), 3, 2, ""},
		{ptr(intstr.FromString("33%")), 3, 1, ""},
		{ptr(intstr.FromString("1%")), 3, 1, ""},
		{ptr(intstr.FromString("100%")), 3, 3, ""},
		{ptr(intstr.FromInt32(0)), 3, 0, "at least 1"},
		{ptr(intstr.FromInt32(-2)), 3, 0, "at least 1"},
		{ptr(intstr.FromString("0%")), 3, 0, "percentage"},
		{ptr(intstr.FromString("101%")), 3, 0, "percentage"},
		{ptr(intstr.FromString("05%")), 3, 0, "percentage"},
		{ptr(intstr.FromString("half")), 3, 0, "percentage"},
		{ptr(intstr.FromString("3")), 3, 0, "percentage"},
	} {
		got, err := (&RolloutSpec{MaxConcurrency: row.mc}).GroupSize(row.n)
		if row.err != "" {
			if err == nil || !strings.Contains(err.Error(), row.err) {
				t.Errorf("%v: want an error with %q, got %d, %v", row.mc, row.err, got, err)
			}
			continue
		}
		if err != nil || got != row.want {
			t.Errorf("%v of %d: %d, %v; want %d", row.mc, row.n, got, err, row.want)
		}
	}
}

func TestRolloutValidate(t *testing.T) {
	neg, zero := int32(-1), int32(0)
	for _, bad := range []*RolloutSpec{{MinAvailableSeconds: -1}, {ProgressDeadlineSeconds: &neg}, {ProgressDeadlineSeconds: &zero},
		{MaxConcurrency: ptr(intstr.FromInt32(0))}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
	if err := (&RolloutSpec{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

func TestRolloutGroups(t *testing.T) {
	targets := []RolloutTarget{
		{Key: "k3", Name: "c", Labels: map[string]string{"wave": "2"}},
		{Key: "k1", Name: "a", Labels: map[string]string{"wave": "1"}},
		{Key: "k4", Name: "d"},
		{Key: "k2", Name: "b", Labels: map[string]string{"wave": "1"}},
		{Key: "k5", Name: "e", Labels: map[string]string{"wave": "2"}},
	}
	for _, row := range []struct {
		spec *RolloutSpec
		want [][]string
	}{
		// One at a time, by name.
		{&RolloutSpec{}, [][]string{{"k1"}, {"k2"}, {"k3"}, {"k4"}, {"k5"}}},
		// Two at a time.
		{&RolloutSpec{MaxConcurrency: ptr(intstr.FromInt32(2))}, [][]string{{"k1", "k2"}, {"k3", "k4"}, {"k5"}}},
		// 40% of 5 is 2.
		{&RolloutSpec{MaxConcurrency: ptr(intstr.FromString("40%"))}, [][]string{{"k1", "k2"}, {"k3", "k4"}, {"k5"}}},
		// By label value, no label last, a group at most maxConcurrency.
		{&RolloutSpec{GroupByLabel: "wave", MaxConcurrency: ptr(intstr.FromInt32(5))}, [][]string{{"k1", "k2"}, {"k3", "k5"}, {"k4"}}},
		{&RolloutSpec{GroupByLabel: "wave"}, [][]string{{"k1"}, {"k2"}, {"k3"}, {"k5"}, {"k4"}}},
	} {
		got, err := row.spec.Groups(targets)
		if err != nil || !reflect.DeepEqual(got, row.want) {
			t.Errorf("%+v: %v, %v; want %v", row.spec, got, err, row.want)
		}
	}
	if got, _ := (&RolloutSpec{}).Groups(nil); len(got) != 0 {
		t.Errorf("no targets: %v", got)
	}
}

func TestRolloutReleased(t *testing.T) {
	st := &RolloutState{Generation: 4, Groups: [][]string{{"a"}, {"b", "c"}, {"d"}}, Current: 1}
	for key, want := range map[string]bool{"a": true, "b": true, "c": true, "d": false, "e": false} {
		if got := st.Released(4, key); got != want {
			t.Errorf("%s: %v, want %v", key, got, want)
		}
	}
	if st.Released(5, "a") {
		t.Error("a state of generation 4 releases generation 5")
	}
	var none *RolloutState
	if none.Released(1, "a") {
		t.Error("no state releases")
	}
	if st.Done() || !(&RolloutState{Groups: [][]string{{"a"}}, Current: 1}).Done() {
		t.Error("Done")
	}
}

func ptr[T any](v T) *T { return &v }
