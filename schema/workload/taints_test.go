package workload

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTolerationMatches(t *testing.T) {
	taint := Taint{Key: "gpu", Value: "a100", Effect: TaintNoSchedule}
	for _, c := range []struct {
		tol  Toleration
		want bool
	}{
		{Toleration{Key: "gpu", Value: "a100"}, true},
		{Toleration{Key: "gpu", Operator: TolerationEqual, Value: "a100", Effect: TaintNoSchedule}, true},
		{Toleration{Key: "gpu", Value: "t4"}, false},
		{Toleration{Key: "gpu"}, false}, // Equal with an empty value
		{Toleration{Key: "gpu", Operator: TolerationExists}, true},
		{Toleration{Key: "gpu", Operator: TolerationExists, Effect: TaintNoExecute}, false},
		{Toleration{Key: "tpu", Operator: TolerationExists}, false},
		{Toleration{Operator: TolerationExists}, true},
		{Toleration{Operator: TolerationExists, Effect: TaintPreferNoSchedule}, false},
		{Toleration{Value: "a100"}, false}, // Equal needs a key
		{Toleration{Key: "gpu", Operator: "In", Value: "a100"}, false},
	} {
		if got := c.tol.Matches(&taint); got != c.want {
			t.Errorf("%+v matches %+v: %v, want %v", c.tol, taint, got, c.want)
		}
	}
}

func TestReservedTaints(t *testing.T) {
	all := []Toleration{{Operator: TolerationExists}}
	named := []Toleration{{Key: "gpu", Operator: TolerationExists}}
	gpu := Taint{Key: "gpu", Effect: TaintNoSchedule, Reserved: true, TolerableBy: []string{"root:ml", "root:research:*"}}
	for _, c := range []struct {
		cluster string
		want    bool
	}{{"root:ml", true}, {"root:research:a", true}, {"root:research", false}, {"root:ml2", false}, {"root:shop", false}} {
		for _, tols := range [][]Toleration{all, named} {
			if got := Tolerating(tols, &gpu, c.cluster) != nil; got != c.want {
				t.Errorf("%s tolerating reserved %v with %+v: %v, want %v", c.cluster, gpu.TolerableBy, tols, got, c.want)
			}
		}
	}
	nobody := Taint{Key: "maintenance", Effect: TaintNoExecute, Reserved: true}
	if Tolerating(all, &nobody, "root:ml") != nil {
		t.Error("a taint reserved for nobody was tolerated")
	}
	cordon := Taint{Key: TaintUnschedulable, Effect: TaintNoSchedule}
	if Tolerating(all, &cordon, "root:ml") != nil || Tolerating([]Toleration{{Key: TaintUnschedulable, Operator: TolerationExists}}, &cordon, "root:ml") != nil {
		t.Error("the cordon taint was tolerated")
	}
}

func TestSchedulable(t *testing.T) {
	taints := []Taint{{Key: "a", Effect: TaintNoSchedule}, {Key: "b", Effect: TaintPreferNoSchedule}}
	if ok, prefer := Schedulable(nil, taints, "root:x"); ok || !prefer {
		t.Errorf("untolerated: %v %v", ok, prefer)
	}
	if ok, prefer := Schedulable([]Toleration{{Key: "a", Operator: TolerationExists}}, taints, "root:x"); !ok || !prefer {
		t.Errorf("NoSchedule tolerated: %v %v", ok, prefer)
	}
	if ok, prefer := Schedulable([]Toleration{{Operator: TolerationExists}}, taints, "root:x"); !ok || prefer {
		t.Errorf("all tolerated: %v %v", ok, prefer)
	}
	if ok, _ := Schedulable(nil, []Taint{{Key: "x", Effect: TaintNoExecute}}, "root:x"); ok {
		t.Error("an untolerated NoExecute taint let a namespace in")
	}
}

func TestEvictionAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	secs := func(n int64) *int64 { return &n }
	maint := Taint{Key: "maintenance", Effect: TaintNoExecute, TimeAdded: &metav1.Time{Time: t0}}
	notReady := Taint{Key: TaintNotReady, Effect: TaintNoExecute, TimeAdded: &metav1.Time{Time: t0.Add(time.Minute)}}
	defaults := map[string]time.Duration{TaintNotReady: 5 * time.Second}

	if _, _, ok := EvictionAt(nil, []Taint{{Key: "x", Effect: TaintNoSchedule}}, "root:x", defaults); ok {
		t.Error("a NoSchedule taint evicts")
	}
	if at, tt, ok := EvictionAt(nil, []Taint{maint}, "root:x", defaults); !ok || !at.Equal(t0) || tt.Key != "maintenance" {
		t.Errorf("untolerated NoExecute: %v %v %v, want at once", at, tt, ok)
	}
	if at, _, ok := EvictionAt([]Toleration{{Key: "maintenance", Operator: TolerationExists, TolerationSeconds: secs(30)}}, []Taint{maint}, "root:x", defaults); !ok || !at.Equal(t0.Add(30*time.Second)) {
		t.Errorf("tolerated 30 s: %v %v", at, ok)
	}
	if at, _, ok := EvictionAt([]Toleration{{Key: "maintenance", Operator: TolerationExists, TolerationSeconds: secs(-3)}}, []Taint{maint}, "root:x", defaults); !ok || !at.Equal(t0) {
		t.Errorf("negative seconds: %v %v, want at once", at, ok)
	}
	if _, _, ok := EvictionAt([]Toleration{{Key: "maintenance", Operator: TolerationExists}}, []Taint{maint}, "root:x", defaults); ok {
		t.Error("tolerated for good, yet evicted")
	}
	// not-ready: the default delay unless a toleration says otherwise.
	if at, _, ok := EvictionAt(nil, []Taint{notReady}, "root:x", defaults); !ok || !at.Equal(t0.Add(time.Minute+5*time.Second)) {
		t.Errorf("not-ready, default: %v %v", at, ok)
	}
	if at, _, ok := EvictionAt([]Toleration{{Key: TaintNotReady, Operator: TolerationExists, TolerationSeconds: secs(600)}}, []Taint{notReady}, "root:x", defaults); !ok || !at.Equal(t0.Add(11*time.Minute)) {
		t.Errorf("not-ready, 600 s: %v %v", at, ok)
	}
	if _, _, ok := EvictionAt([]Toleration{{Key: TaintNotReady, Operator: TolerationExists}}, []Taint{notReady}, "root:x", defaults); ok {
		t.Error("not-ready tolerated for good, yet evicted")
	}
	// The earliest end wins.
	if at, tt, ok := EvictionAt([]Toleration{{Key: "maintenance", Operator: TolerationExists, TolerationSeconds: secs(3600)}}, []Taint{maint, notReady}, "root:x", defaults); !ok || tt.Key != TaintNotReady || !at.Equal(t0.Add(65*time.Second)) {
		t.Errorf("two taints: %v %v %v", at, tt, ok)
	}
	// A reserved NoExecute taint the workspace may not tolerate evicts at
	// once whatever its tolerations say.
	res := maint
	res.Reserved = true
	if at, _, ok := EvictionAt([]Toleration{{Operator: TolerationExists}}, []Taint{res}, "root:x", defaults); !ok || !at.Equal(t0) {
		t.Errorf("reserved: %v %v", at, ok)
	}
}
