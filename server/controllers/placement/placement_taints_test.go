package placement

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestChooseTaints(t *testing.T) {
	const loc = "root:compute"
	now := time.Now()
	newTarget := func(name string, ready bool, since time.Duration, taints ...workload.Taint) *unstructured.Unstructured {
		st := &workload.SyncTarget{TypeMeta: metav1.TypeMeta{APIVersion: "workload.kcp.io/v1alpha1", Kind: "SyncTarget"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{logicalcluster.Annotation: loc}}}
		status := metav1.ConditionTrue
		if !ready {
			status = metav1.ConditionFalse
		}
		st.Spec.Taints = taints
		st.Status.Conditions = []metav1.Condition{{Type: workload.ConditionReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-since))}}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: u}
	}
	setup := func(rate float64, spec string, targets ...*unstructured.Unstructured) *Controller {
		c := &Controller{evictionDelay: 10 * time.Second, limiter: newEvictionLimiter(rate),
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
	ns := func(name string, assigned ...string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
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
	at := func(ago time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-ago)); return &t }
	gpu := workload.Taint{Key: "gpu", Effect: workload.TaintNoSchedule, TimeAdded: at(time.Hour)}
	maint := func(ago time.Duration) workload.Taint {
		return workload.Taint{Key: "maintenance", Effect: workload.TaintNoExecute, TimeAdded: at(ago)}
	}
	const all = `{"locationWorkspace":"root:compute","namespaceSelector":{}`

	// NoSchedule: a new namespace goes to the untainted target only;
	// one already there stays; a toleration lets it in.
	c := setup(0, all+`,"allClusters":true}`, newTarget("a", true, time.Hour, gpu), newTarget("b", true, time.Hour))
	if _, chosen, _, _ := c.choose(now, "root:team", ns("n")); names(chosen) != "b" {
		t.Errorf("NoSchedule: %s, want b", names(chosen))
	}
	if _, chosen, _, _ := c.choose(now, "root:team", ns("n", "a", "b")); names(chosen) != "a,b" {
		t.Errorf("NoSchedule keeps what is there: %s", names(chosen))
	}
	c = setup(0, all+`,"allClusters":true,"tolerations":[{"key":"gpu","operator":"Exists"}]}`, newTarget("a", true, time.Hour, gpu), newTarget("b", true, time.Hour))
	if _, chosen, _, _ := c.choose(now, "root:team", ns("n")); names(chosen) != "a,b" {
		t.Errorf("tolerated NoSchedule: %s", names(chosen))
	}
	// PreferNoSchedule: last choice.
	prefer := workload.Taint{Key: "old", Effect: workload.TaintPreferNoSchedule}
	for i := range 20 {
		c = setup(0, all+`}`, newTarget("a", true, time.Hour, prefer), newTarget("b", true, time.Hour))
		if _, chosen, _, _ := c.choose(now, "root:team", ns("n"+string(rune('a'+i)))); names(chosen) != "b" {
			t.Errorf("PreferNoSchedule: %s, want b", names(chosen))
		}
	}

	// NoExecute not tolerated on a Ready target: leaving (kept until the
	// replacement runs); with nowhere to go, it stays.
	c = setup(0, all+`}`, newTarget("a", true, time.Hour, maint(time.Second)), newTarget("b", true, time.Hour))
	if _, chosen, leaving, _ := c.choose(now, "root:team", ns("n", "a")); names(chosen) != "b" || names(leaving) != "a" {
		t.Errorf("NoExecute: chosen %s leaving %s", names(chosen), names(leaving))
	}
	c = setup(0, all+`}`, newTarget("a", true, time.Hour, maint(time.Second)))
	if _, chosen, leaving, _ := c.choose(now, "root:team", ns("n", "a")); names(chosen) != "a" || len(leaving) != 0 {
		t.Errorf("NoExecute with nowhere to go: chosen %s leaving %s", names(chosen), names(leaving))
	}
	// Tolerated for 60 s: stays with a recheck before the end, then leaves.
	tol60 := all + `,"tolerations":[{"key":"maintenance","operator":"Exists","effect":"NoExecute","tolerationSeconds":60}]}`
	c = setup(0, tol60, newTarget("a", true, time.Hour, maint(30*time.Second)), newTarget("b", true, time.Hour))
	if _, chosen, leaving, recheck := c.choose(now, "root:team", ns("n", "a")); names(chosen) != "a" || len(leaving) != 0 || recheck <= 0 || recheck > 31*time.Second {
		t.Errorf("tolerated for 60 s, 30 s in: chosen %s leaving %s recheck %s", names(chosen), names(leaving), recheck)
	}
	c = setup(0, tol60, newTarget("a", true, time.Hour, maint(61*time.Second)), newTarget("b", true, time.Hour))
	if _, chosen, leaving, _ := c.choose(now, "root:team", ns("n", "a")); names(chosen) != "b" || names(leaving) != "a" {
		t.Errorf("tolerated for 60 s, 61 s in: chosen %s leaving %s", names(chosen), names(leaving))
	}
	// Once the toleration has ended, the target takes no namespace of the
	// Placement: one that left it does not come back (to leave again at
	// once, over and over), nor does a new one go there.
	tol60all := all + `,"allClusters":true,"tolerations":[{"key":"maintenance","operator":"Exists","effect":"NoExecute","tolerationSeconds":60}]}`
	c = setup(0, tol60all, newTarget("a", true, time.Hour, maint(61*time.Second)), newTarget("b", true, time.Hour))
	if _, chosen, leaving, _ := c.choose(now, "root:team", ns("n", "b")); names(chosen) != "b" || len(leaving) != 0 {
		t.Errorf("toleration ended, the namespace left a: chosen %s leaving %s, want b", names(chosen), names(leaving))
	}
	if _, chosen, _, _ := c.choose(now, "root:team", ns("new")); names(chosen) != "b" {
		t.Errorf("toleration ended, a new namespace: %s, want b", names(chosen))
	}
	c = setup(0, tol60all, newTarget("a", true, time.Hour, maint(30*time.Second)), newTarget("b", true, time.Hour))
	if _, chosen, _, _ := c.choose(now, "root:team", ns("new")); names(chosen) != "a,b" {
		t.Errorf("toleration running, a new namespace: %s, want a,b", names(chosen))
	}
	// Tolerating not-ready for good keeps a namespace on a dead target.
	c = setup(0, all+`,"tolerations":[{"key":"workload.kcp.io/not-ready","operator":"Exists"}]}`, newTarget("a", false, time.Hour), newTarget("b", true, time.Hour))
	if _, chosen, _, _ := c.choose(now, "root:team", ns("n", "a")); names(chosen) != "a" {
		t.Errorf("not-ready tolerated for good: %s", names(chosen))
	}

	// Rate limit: two targets dead past the delay; one target per 100 s.
	c = setup(0.01, all+`}`, newTarget("a", false, time.Minute), newTarget("b", false, time.Minute), newTarget("c", true, time.Hour))
	if _, chosen, _, _ := c.choose(now, "root:team", ns("n1", "a")); names(chosen) != "c" {
		t.Errorf("first eviction: %s, want c", names(chosen))
	}
	if _, chosen, _, _ := c.choose(now, "root:team", ns("n2", "a")); names(chosen) != "c" {
		t.Errorf("a second namespace of the granted target: %s, want c", names(chosen))
	}
	_, chosen, _, recheck := c.choose(now, "root:team", ns("n3", "b"))
	if names(chosen) != "b" || recheck < 99*time.Second || recheck > 101*time.Second {
		t.Errorf("second target: %s, recheck %s, want kept for 100 s", names(chosen), recheck)
	}
	if n, _ := c.limiter.waitingOn(now, loc+"/b"); n != 1 {
		t.Errorf("waiting on b: %d", n)
	}
	if _, chosen, _, _ := c.choose(now.Add(101*time.Second), "root:team", ns("n3", "b")); names(chosen) != "c" {
		t.Errorf("second target after its turn: %s, want c", names(chosen))
	}
	if n, _ := c.limiter.waitingOn(now.Add(101*time.Second), loc+"/b"); n != 0 {
		t.Errorf("still waiting on b: %d", n)
	}
}

// TestUnhonoredTolerations: a toleration of a taint reserved after the
// Placement was admitted is named in its status.
func TestUnhonoredTolerations(t *testing.T) {
	st := &workload.SyncTarget{TypeMeta: metav1.TypeMeta{APIVersion: "workload.kcp.io/v1alpha1", Kind: "SyncTarget"},
		ObjectMeta: metav1.ObjectMeta{Name: "pc1", Annotations: map[string]string{logicalcluster.Annotation: "root:compute"}}}
	st.Spec.Taints = []workload.Taint{{Key: "gpu", Effect: workload.TaintNoSchedule, Reserved: true, TolerableBy: []string{"root:ml"}}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{targets: cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)}
	_ = c.targets.Add(&unstructured.Unstructured{Object: u})
	p := &workload.Placement{Spec: workload.PlacementSpec{LocationWorkspace: "root:compute", Tolerations: []workload.Toleration{{Key: "gpu", Operator: workload.TolerationExists}}}}
	if msg := c.unhonoredTolerations("root:shop", p); !strings.Contains(msg, "the toleration of gpu does not apply to SyncTarget pc1") {
		t.Errorf("shop: %q", msg)
	}
	if msg := c.unhonoredTolerations("root:ml", p); msg != "" {
		t.Errorf("ml: %q", msg)
	}
}

func TestSpecTaints(t *testing.T) {
	now := metav1.Now()
	st := &workload.SyncTarget{}
	st.Spec.Taints = []workload.Taint{{Key: "gpu", Effect: workload.TaintNoSchedule}}
	st.Status.Conditions = []metav1.Condition{{Type: workload.ConditionReady, Status: metav1.ConditionFalse, LastTransitionTime: now}}
	st.Spec.Unschedulable = true
	want, changed := wantSpecTaints(st)
	if !changed || len(want) != 3 || want[0].Key != "gpu" || want[1].Key != workload.TaintNotReady || !want[1].TimeAdded.Equal(&now) || want[2].Key != workload.TaintUnschedulable {
		t.Fatalf("not ready, cordoned: %v %+v", changed, want)
	}
	st.Spec.Taints = want
	if _, changed := wantSpecTaints(st); changed {
		t.Error("a second pass changes the taints")
	}
	st.Status.Conditions[0].Status = metav1.ConditionTrue
	st.Spec.Unschedulable = false
	if want, changed := wantSpecTaints(st); !changed || len(want) != 1 || want[0].Key != "gpu" {
		t.Errorf("ready, uncordoned: %v %+v", changed, want)
	}
}

// TestEvictionLimiterOrder: turns go to targets in the order they first
// asked, one per period; a target that stops asking loses its place.
func TestEvictionLimiterOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newEvictionLimiter(0.1) // one per 10 s
	if ok, _ := l.admit(t0, "x", "e", "x/ns"); !ok {
		t.Fatal("the first target waits")
	}
	if ok, wait := l.admit(t0.Add(time.Second), "b", "e", "b/ns"); ok || wait != 9*time.Second {
		t.Errorf("b: %v %s, want a wait of 9 s", ok, wait)
	}
	if ok, _ := l.admit(t0.Add(2*time.Second), "c", "e", "c/ns"); ok {
		t.Error("c granted within the period")
	}
	// c asks first when the period is over: b asked before it.
	if ok, wait := l.admit(t0.Add(10*time.Second), "c", "e", "c/ns"); ok || wait <= 0 {
		t.Errorf("c before b: %v %s", ok, wait)
	}
	if ok, _ := l.admit(t0.Add(10*time.Second+100*time.Millisecond), "b", "e", "b/ns"); !ok {
		t.Error("b, first to ask, not granted at its turn")
	}
	if ok, _ := l.admit(t0.Add(11*time.Second), "b", "e", "b/other"); !ok {
		t.Error("another namespace of the granted target waits")
	}
	if ok, _ := l.admit(t0.Add(20*time.Second+200*time.Millisecond), "c", "e", "c/ns"); !ok {
		t.Error("c not granted at its turn")
	}
	// A new episode of a granted target asks anew.
	if ok, _ := l.admit(t0.Add(21*time.Second), "x", "e2", "x/ns"); ok {
		t.Error("a new episode granted within the period")
	}
	// d asked before e but recovered (stopped asking): e is not held up
	// for long.
	if ok, _ := l.admit(t0.Add(22*time.Second), "d", "e", "d/ns"); ok {
		t.Error("d granted within the period")
	}
	if ok, _ := l.admit(t0.Add(60*time.Second), "e", "e", "e/ns"); !ok {
		t.Error("e held up by x and d, which stopped asking")
	}
}
