package placement

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestReconcileAssignment(t *testing.T) {
	pc1, pc2 := workload.StateLabel("root:compute", "pc1"), workload.StateLabel("root:compute", "pc2")
	f1, f2 := workload.Finalizer("root:compute", "pc1"), workload.Finalizer("root:compute", "pc2")
	ns := func(labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: labels}}
	}
	obj := func(labels map[string]string, finalizers ...string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]interface{}{}}
		o.SetLabels(labels)
		o.SetFinalizers(finalizers)
		return o
	}

	// Assigned namespace: label and finalizer added, user labels kept.
	o := obj(map[string]string{"app": "web"}, "user/keep")
	if !reconcileAssignment(o, ns(map[string]string{pc1: workload.StateSync})) {
		t.Fatal("no change reported")
	}
	if o.GetLabels()[pc1] != workload.StateSync || o.GetLabels()["app"] != "web" || !slices.Equal(o.GetFinalizers(), []string{"user/keep", f1}) {
		t.Errorf("assigned: %v %v", o.GetLabels(), o.GetFinalizers())
	}
	if reconcileAssignment(o, ns(map[string]string{pc1: workload.StateSync})) {
		t.Error("a second pass reports a change")
	}

	// Moved to pc2: pc1's label and finalizer go, pc2's come.
	if !reconcileAssignment(o, ns(map[string]string{pc2: workload.StateSync})) {
		t.Fatal("no change reported")
	}
	if _, ok := o.GetLabels()[pc1]; ok || o.GetLabels()[pc2] != workload.StateSync || !slices.Equal(o.GetFinalizers(), []string{"user/keep", f2}) {
		t.Errorf("moved: %v %v", o.GetLabels(), o.GetFinalizers())
	}

	// On two targets each reports its status in its annotation; down to
	// one, the annotations go (that target writes the status itself, and a
	// stale annotation would count again when a second target comes).
	two := ns(map[string]string{pc1: workload.StateSync, pc2: workload.StateSync})
	reconcileAssignment(o, two)
	o.SetAnnotations(map[string]string{workload.StatusAnnotationPrefix + workload.TargetKey("root:compute", "pc1"): "{}",
		workload.StatusAnnotationPrefix + workload.TargetKey("root:compute", "pc2"): "{}", "user": "kept"})
	if reconcileAssignment(o, two) {
		t.Error("the annotations of two assigned targets were changed")
	}
	if !reconcileAssignment(o, ns(map[string]string{pc2: workload.StateSync})) || len(o.GetAnnotations()) != 1 {
		t.Errorf("down to one target: %v", o.GetAnnotations())
	}

	// Unassigned: everything of the syncers goes, the rest stays.
	reconcileAssignment(o, ns(nil))
	if len(o.GetLabels()) != 1 || !slices.Equal(o.GetFinalizers(), []string{"user/keep"}) {
		t.Errorf("unassigned: %v %v", o.GetLabels(), o.GetFinalizers())
	}

	// An object being deleted gets no new finalizer.
	d := obj(nil)
	now := metav1.Now()
	d.SetDeletionTimestamp(&now)
	if reconcileAssignment(d, ns(map[string]string{pc1: workload.StateSync})) || len(d.GetFinalizers()) != 0 {
		t.Errorf("a deleting object was assigned: %v", d.GetFinalizers())
	}
}

// TestChoose: how many targets a namespace gets, spread by label, sticking
// with its targets, eviction of a dead one after the delay, and a drain
// that keeps the leaving target until it is replaced.
func TestChoose(t *testing.T) {
	const loc = "root:compute"
	now := time.Now()
	newTarget := func(name, region string, readyFor time.Duration, drain bool) *unstructured.Unstructured {
		st := &workload.SyncTarget{TypeMeta: metav1.TypeMeta{APIVersion: "workload.kcp.io/v1alpha1", Kind: "SyncTarget"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"region": region}, Annotations: map[string]string{logicalcluster.Annotation: loc}}}
		st.Spec.Drain, st.Spec.Unschedulable = drain, drain
		status := metav1.ConditionTrue
		if readyFor < 0 {
			status, readyFor = metav1.ConditionFalse, -readyFor
		}
		st.Status.Conditions = []metav1.Condition{{Type: workload.ConditionReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-readyFor))}}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: u}
	}
	setup := func(spec string, targets ...*unstructured.Unstructured) *Controller {
		c := &Controller{evictionDelay: 10 * time.Second,
			placements: cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers),
			targets:    cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)}
		p := &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(`{"apiVersion":"workload.kcp.io/v1alpha1","kind":"Placement","metadata":{"name":"p","annotations":{"kcp.io/cluster":"root:team"}},"spec":`+spec+`}`), &p.Object); err != nil {
			t.Fatal(err)
		}
		_ = c.placements.Add(p)
		for _, tg := range targets {
			_ = c.targets.Add(tg)
		}
		return c
	}
	ns := func(assigned ...string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{}}}
		for _, a := range assigned {
			n.Labels[workload.StateLabel(loc, a)] = workload.StateSync
		}
		return n
	}
	names := func(ts []target) string {
		var out []string
		for _, tg := range ts {
			out = append(out, tg.obj.Name)
		}
		return strings.Join(out, ",")
	}
	eu1, eu2, us1 := newTarget("eu1", "eu", time.Hour, false), newTarget("eu2", "eu", time.Hour, false), newTarget("us1", "us", time.Hour, false)

	c := setup(`{"locationWorkspace":"root:compute","namespaceSelector":{}}`, eu1, eu2, us1)
	if _, chosen, _, _ := c.choose(now, "root:team", ns()); len(chosen) != 1 {
		t.Errorf("default: %s, want one target", names(chosen))
	}
	if _, chosen, _, _ := c.choose(now, "root:team", ns("eu2")); names(chosen) != "eu2" {
		t.Errorf("a Ready assignment sticks: %s", names(chosen))
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{},"allClusters":true}`, eu1, eu2, us1)
	if _, chosen, _, _ := c.choose(now, "root:team", ns()); names(chosen) != "eu1,eu2,us1" {
		t.Errorf("allClusters: %s", names(chosen))
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{},"numberOfClusters":2}`, eu1, eu2, us1)
	if _, chosen, _, _ := c.choose(now, "root:team", ns("eu1", "eu2", "us1")); len(chosen) != 2 {
		t.Errorf("numberOfClusters 2, was on three: %s", names(chosen))
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{},"allClusters":true,"spreadByLabel":"region"}`, eu1, eu2, us1)
	if _, chosen, _, _ := c.choose(now, "root:team", ns()); len(chosen) != 2 || !strings.Contains(names(chosen), "us1") {
		t.Errorf("one per region: %s", names(chosen))
	}

	// eu1 dead for 5 s: kept (delay 10 s), with a recheck; for 20 s: gone,
	// replaced by the free target in Duplicate with one wanted.
	dead := func(d time.Duration) *unstructured.Unstructured { return newTarget("eu1", "eu", -d, false) }
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{}}`, dead(5*time.Second), eu2)
	if _, chosen, _, recheck := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu1" || recheck <= 0 || recheck > 6*time.Second {
		t.Errorf("dead for 5 s: %s, recheck %s", names(chosen), recheck)
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{}}`, dead(20*time.Second), eu2)
	if _, chosen, _, _ := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu2" {
		t.Errorf("dead for 20 s: %s, want eu2", names(chosen))
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{}}`, dead(20*time.Second))
	if _, chosen, _, _ := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu1" {
		t.Errorf("dead with nowhere to go: %s, want it kept", names(chosen))
	}

	// A target whose syncer has not caught up since it started gets no new
	// namespace, and keeps the ones it has (also with allClusters).
	starting := newTarget("eu2", "eu", time.Hour, false)
	unstructured.SetNestedSlice(starting.Object, append(starting.Object["status"].(map[string]interface{})["conditions"].([]interface{}),
		map[string]interface{}{"type": workload.ConditionCaughtUp, "status": "False", "reason": "Starting", "message": "", "lastTransitionTime": now.UTC().Format(time.RFC3339)}),
		"status", "conditions")
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{},"allClusters":true}`, eu1, starting)
	if _, chosen, _, _ := c.choose(now, "root:team", ns()); names(chosen) != "eu1" {
		t.Errorf("a target catching up was chosen: %s", names(chosen))
	}
	if _, chosen, _, _ := c.choose(now, "root:team", ns("eu1", "eu2")); names(chosen) != "eu1,eu2" {
		t.Errorf("a target catching up lost its namespace: %s", names(chosen))
	}

	// Draining eu1: eu2 takes over, eu1 is leaving (kept until replaced).
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{}}`, newTarget("eu1", "eu", time.Hour, true), eu2)
	if _, chosen, leaving, _ := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu2" || names(leaving) != "eu1" {
		t.Errorf("drain: chosen %s leaving %s", names(chosen), names(leaving))
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{}}`, newTarget("eu1", "eu", time.Hour, true))
	if _, chosen, leaving, _ := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu1" || len(leaving) != 0 {
		t.Errorf("drain with nowhere to go: chosen %s leaving %s", names(chosen), names(leaving))
	}

	// Suspended: the assignment is frozen. Dead for 20 s, draining, or no
	// longer selected, a suspended target keeps the namespace; nothing new
	// is assigned under spec.suspend.
	for _, spec := range []string{
		`{"locationWorkspace":"root:compute","namespaceSelector":{},"suspend":true}`,
		`{"locationWorkspace":"root:compute","namespaceSelector":{},"suspendTargets":["eu1"]}`,
	} {
		c = setup(spec, dead(20*time.Second), eu2)
		if _, chosen, _, _ := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu1" {
			t.Errorf("%s, dead for 20 s: %s, want eu1 kept", spec, names(chosen))
		}
		c = setup(spec, newTarget("eu1", "eu", time.Hour, true), eu2)
		if _, chosen, leaving, _ := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu1" || len(leaving) != 0 {
			t.Errorf("%s, draining: chosen %s leaving %s", spec, names(chosen), names(leaving))
		}
		c = setup(strings.Replace(spec, `"namespaceSelector":{}`, `"namespaceSelector":{},"locationSelector":{"matchLabels":{"region":"us"}}`, 1), eu1, us1)
		if _, chosen, _, _ := c.choose(now, "root:team", ns("eu1")); !strings.HasPrefix(names(chosen), "eu1") {
			t.Errorf("%s, no longer selected: %s, want eu1 kept", spec, names(chosen))
		}
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{},"suspend":true}`, eu1, eu2)
	if _, chosen, _, _ := c.choose(now, "root:team", ns()); len(chosen) != 0 {
		t.Errorf("suspend assigned a new namespace: %s", names(chosen))
	}
	c = setup(`{"locationWorkspace":"root:compute","namespaceSelector":{},"allClusters":true,"suspendTargets":["eu1"]}`, eu1, eu2)
	if _, chosen, _, _ := c.choose(now, "root:team", ns("eu1")); names(chosen) != "eu1,eu2" {
		t.Errorf("suspendTargets does not stop the others: %s", names(chosen))
	}
	pol := policy(&workload.Placement{Spec: workload.PlacementSpec{SuspendTargets: []string{"eu1"}, ConflictResolution: workload.ConflictAdopt}},
		[]target{{location: loc, obj: &workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "eu1"}}}, {location: loc, obj: &workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "eu2"}}}}, nil)
	if !pol.Suspended(workload.TargetKey(loc, "eu1")) || pol.Suspended(workload.TargetKey(loc, "eu2")) || !pol.Adopts() {
		t.Errorf("policy: %+v", pol)
	}
}

func TestPolicy(t *testing.T) {
	mk := func(name string, labels map[string]string, cpu string) target {
		st := &workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if cpu != "" {
			st.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return target{location: "root:compute", obj: st}
	}
	a, b := mk("a", map[string]string{"region": "us"}, "4"), mk("b", map[string]string{"region": "eu"}, "2")
	p := &workload.Placement{Spec: workload.PlacementSpec{Mode: workload.ModeDivide,
		Weights:   []workload.TargetWeight{{Selector: map[string]string{"region": "us"}, Weight: 3}},
		Overrides: []workload.Override{{Selector: map[string]string{"region": "eu"}, Patch: runtime.RawExtension{Raw: []byte(`{}`)}}}}}
	pol := policy(p, []target{a, b}, nil)
	ka, kb := workload.TargetKey("root:compute", "a"), workload.TargetKey("root:compute", "b")
	if pol.Targets[ka].Weight != 3 || pol.Targets[kb].Weight != 1 || len(pol.Targets[ka].Overrides) != 0 || len(pol.Targets[kb].Overrides) != 1 {
		t.Errorf("static: %+v", pol)
	}
	p.Spec.WeightsFrom = workload.WeightsCapacity
	pol = policy(p, []target{a, b}, nil)
	if pol.Targets[ka].Weight != 12000 || pol.Targets[kb].Weight != 2000 {
		t.Errorf("capacity: %+v", pol.Targets)
	}
	pol = policy(&workload.Placement{}, []target{a}, []target{b})
	if pol.Mode != workload.ModeDuplicate || !pol.Targets[kb].Leaving || pol.Targets[ka].Leaving {
		t.Errorf("leaving: %+v", pol)
	}
}

// TestRebalancingFrom: a change of a Divide namespace's division starts a
// rebalancing from the division before; a further change during it keeps
// the division it started from; no change, no rebalancing.
func TestRebalancingFrom(t *testing.T) {
	div := func(weights map[string]int64) *workload.NamespacePolicy {
		p := &workload.NamespacePolicy{Mode: workload.ModeDivide, Targets: map[string]workload.TargetPolicy{}}
		for k, w := range weights {
			p.Targets[k] = workload.TargetPolicy{Weight: w}
		}
		return p
	}
	ab, abc := map[string]int64{"a": 1, "b": 1}, map[string]int64{"a": 1, "b": 1, "c": 1}
	same := func(got []map[string]int64, want ...map[string]int64) bool {
		return slices.EqualFunc(got, want, func(x, y map[string]int64) bool { return maps.Equal(x, y) })
	}
	if got := rebalancingFrom(nil, div(ab)); got != nil {
		t.Errorf("first placement: %v", got)
	}
	if got := rebalancingFrom(div(ab), div(ab)); got != nil {
		t.Errorf("no change: %v", got)
	}
	if got := rebalancingFrom(div(ab), div(abc)); !same(got, ab) {
		t.Errorf("c joined: %v", got)
	}
	during := div(abc)
	during.Previous = []map[string]int64{ab}
	c3 := map[string]int64{"a": 1, "b": 1, "c": 3}
	if got := rebalancingFrom(during, div(c3)); !same(got, ab, abc) {
		t.Errorf("c's weight changed during the rebalancing: %v", got)
	}
	// c dies during it, and comes back: a and b keep every division they
	// may run until the end.
	gone := div(ab)
	gone.Previous = []map[string]int64{ab, abc}
	if got := rebalancingFrom(gone, div(abc)); !same(got, ab, abc) {
		t.Errorf("c back during the rebalancing: %v", got)
	}
	dup := div(ab)
	dup.Mode = workload.ModeDuplicate
	if got := rebalancingFrom(dup, div(abc)); got != nil {
		t.Errorf("from Duplicate: %v", got)
	}
	leaving := div(abc)
	leaving.Targets["c"] = workload.TargetPolicy{Leaving: true}
	if got := rebalancingFrom(div(abc), leaving); !same(got, abc) {
		t.Errorf("c draining: %v", got)
	}
	many := div(ab)
	for i := range 10 {
		next := div(map[string]int64{"a": 1, "b": int64(i + 2)})
		next.Previous = rebalancingFrom(many, next)
		many = next
	}
	if len(many.Previous) != maxPrevious {
		t.Errorf("divisions kept after 10 changes: %d", len(many.Previous))
	}
}
