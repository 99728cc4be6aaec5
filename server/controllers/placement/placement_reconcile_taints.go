package placement

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Taints (schema/workload/taints.go). What a target's taints are, for
// assignment, is its spec.taints of the location's own plus kcp's, derived
// here from its status and spec (not-ready from the Ready condition, since
// its last transition; unschedulable from cordon), so that decisions never
// wait for kcp's taints to be written. The writer (reconcileTaints) then
// shows kcp's taints in spec.taints, as the node lifecycle controller does
// for nodes.
//
// Evictions (a namespace leaving a target because a NoExecute taint is no
// longer tolerated: not-ready after the eviction delay, or the location's
// own) are rate limited per target: evictionLimiter grants one target per
// 1/rate seconds, and a granted target's namespaces all move. Targets, not
// namespaces, are the unit, as for kube-controller-manager's nodes: a
// target is the failure domain, its namespaces fail together, and a
// flapping network that makes many targets NotReady at once then moves
// them one at a time, each completely, instead of a slice of every one.

// taintsOf is what assignment reads of a target's taints: the location's
// own, and kcp's as the target's state says they are.
func taintsOf(t *workload.SyncTarget) []workload.Taint {
	var out []workload.Taint
	for _, tt := range t.Spec.Taints {
		if !workload.KCPTaint(tt.Key) {
			out = append(out, tt)
		}
	}
	return append(out, kcpTaints(t, t.Spec.Taints)...)
}

// kcpTaints are the taints kcp puts on a target; prev are those it has
// (their timeAdded stays).
func kcpTaints(t *workload.SyncTarget, prev []workload.Taint) []workload.Taint {
	var out []workload.Taint
	if !ready(t) {
		since := metav1.NewTime(notReadySince(t))
		out = append(out, workload.Taint{Key: workload.TaintNotReady, Effect: workload.TaintNoExecute, TimeAdded: &since})
	}
	if t.Spec.Unschedulable {
		added := metav1.Now()
		for _, p := range prev {
			if p.Key == workload.TaintUnschedulable && p.TimeAdded != nil {
				added = *p.TimeAdded
			}
		}
		out = append(out, workload.Taint{Key: workload.TaintUnschedulable, Effect: workload.TaintNoSchedule, TimeAdded: &added})
	}
	if c := meta.FindStatusCondition(t.Status.Conditions, workload.ConditionOutOfCapacity); c != nil && c.Status == metav1.ConditionTrue && ready(t) {
		since := c.LastTransitionTime
		out = append(out, workload.Taint{Key: workload.TaintOutOfCapacity, Effect: workload.TaintNoSchedule, TimeAdded: &since})
	}
	return out
}

// wantSpecTaints is the spec.taints a target should have: the location's
// own as they are, kcp's as its state says; changed is false when that is
// what it has.
func wantSpecTaints(t *workload.SyncTarget) (want []workload.Taint, changed bool) {
	var own, kcp []workload.Taint
	for _, tt := range t.Spec.Taints {
		if workload.KCPTaint(tt.Key) {
			kcp = append(kcp, tt)
		} else {
			own = append(own, tt)
		}
	}
	next := kcpTaints(t, kcp)
	if len(next) == len(kcp) {
		same := true
		for i := range next {
			a, b := next[i], kcp[i]
			if a.Key != b.Key || a.Effect != b.Effect || a.Value != b.Value || (a.Key == workload.TaintNotReady && !a.TimeAdded.Equal(b.TimeAdded)) {
				same = false
			}
		}
		if same {
			return t.Spec.Taints, false
		}
	}
	return append(own, next...), true
}

// needsTaints reports whether a SyncTarget's spec.taints lacks kcp's
// taints as its state says they are (or has stale ones).
func needsTaints(u *unstructured.Unstructured) bool {
	t, err := decodeTarget(u)
	if err != nil || t.DeletionTimestamp != nil {
		return false
	}
	_, changed := wantSpecTaints(t)
	return changed
}

// taintLater queues a SyncTarget whose kcp taints are to be written.
func (c *Controller) taintLater(obj interface{}) {
	if u, ok := obj.(*unstructured.Unstructured); ok && needsTaints(u) {
		c.queue.Add("st:" + clusterinformer.Key(clusterinformer.ClusterOf(u), "", u.GetName()))
	}
}

// reconcileTaints writes kcp's taints into a SyncTarget's spec.taints.
func (c *Controller) reconcileTaints(ctx context.Context, cluster logicalcluster.Name, name string) error {
	obj, ok, _ := c.targets.GetByKey(clusterinformer.Key(cluster, "", name))
	if !ok {
		return nil
	}
	u := obj.(*unstructured.Unstructured)
	t, err := decodeTarget(u)
	if err != nil || t.DeletionTimestamp != nil {
		return nil
	}
	want, changed := wantSpecTaints(t)
	if !changed {
		return nil
	}
	out := u.DeepCopy()
	if len(want) == 0 {
		unstructured.RemoveNestedField(out.Object, "spec", "taints")
	} else {
		raw := make([]interface{}, 0, len(want))
		for i := range want {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want[i])
			if err != nil {
				return err
			}
			raw = append(raw, m)
		}
		if err := unstructured.SetNestedSlice(out.Object, raw, "spec", "taints"); err != nil {
			return err
		}
	}
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	_, err = d.Resource(workload.SyncTargetsResource).Update(ctx, out, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// evictionLimiter lets one target per 1/rate seconds start evicting. An
// eviction is a target's episode: the NoExecute taint that ended the
// stay, with the time it was added; a target that recovers and fails
// again asks anew.
type evictionLimiter struct {
	mu    sync.Mutex
	every time.Duration // 0: no bound
	next  time.Time     // when the next grant may come
	// granted episodes, and when.
	granted map[string]time.Time
	// waiting targets: their namespaces that wait (until when they are
	// noted as such), and the next turn.
	waiting map[string]waitingTarget
}

type waitingTarget struct {
	namespaces map[string]time.Time
	since      time.Time // first asked
	until      time.Time // its next turn
}

func newEvictionLimiter(rate float64) *evictionLimiter {
	l := &evictionLimiter{granted: map[string]time.Time{}, waiting: map[string]waitingTarget{}}
	if rate > 0 {
		l.every = time.Duration(float64(time.Second) / rate)
	}
	return l
}

// admit asks for a target's eviction episode; when not granted yet, it
// says how long to wait and notes the namespace as waiting. Turns go in
// the order targets first asked (a target whose namespaces stop asking,
// because it recovered, drops out a few seconds after its turn).
func (l *evictionLimiter) admit(now time.Time, ref, episode, nsKey string) (bool, time.Duration) {
	if l == nil || l.every == 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := ref + "@" + episode
	if _, ok := l.granted[key]; ok {
		return true, 0
	}
	for k, at := range l.granted {
		if now.Sub(at) > time.Hour {
			delete(l.granted, k)
		}
	}
	w := l.waiting[ref]
	if w.namespaces == nil {
		w.namespaces = map[string]time.Time{}
		w.since = now
	}
	if !now.Before(l.next) && l.first(now, ref, w.since) {
		l.granted[key] = now
		l.next = now.Add(l.every)
		delete(l.waiting, ref)
		return true, 0
	}
	turn := l.next
	if !turn.After(now) {
		// Another target's turn: look again shortly.
		turn = now.Add(time.Second)
	}
	// Noted until a little after its turn (it is looked at again then).
	w.namespaces[nsKey] = turn.Add(5 * time.Second)
	w.until = turn
	l.waiting[ref] = w
	return false, turn.Sub(now)
}

// first reports whether ref (waiting since since) asked before every other
// target still waiting.
func (l *evictionLimiter) first(now time.Time, ref string, since time.Time) bool {
	for other, w := range l.waiting {
		if other == ref {
			continue
		}
		live := false
		for _, expires := range w.namespaces {
			if now.Before(expires) {
				live = true
				break
			}
		}
		if live && (w.since.Before(since) || (w.since.Equal(since) && other < ref)) {
			return false
		}
	}
	return true
}

// waitingOn says how many namespaces of a target wait for the rate limit,
// and until when.
func (l *evictionLimiter) waitingOn(now time.Time, ref string) (int, time.Time) {
	if l == nil {
		return 0, time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.waiting[ref]
	if !ok {
		return 0, time.Time{}
	}
	n := 0
	for k, expires := range w.namespaces {
		if now.After(expires) {
			delete(w.namespaces, k)
			continue
		}
		n++
	}
	if n == 0 {
		delete(l.waiting, ref)
	}
	return n, w.until
}

// writeEvictionCondition sets or removes a target's EvictionRateLimited
// condition in obj (reporting whether it changed).
func (c *Controller) writeEvictionCondition(now time.Time, ref string, obj *workload.SyncTarget) bool {
	n, until := c.limiter.waitingOn(now, ref)
	if n == 0 {
		return meta.RemoveStatusCondition(&obj.Status.Conditions, workload.ConditionEvictionRateLimited)
	}
	prev := meta.FindStatusCondition(obj.Status.Conditions, workload.ConditionEvictionRateLimited)
	cond := metav1.Condition{Type: workload.ConditionEvictionRateLimited, Status: metav1.ConditionTrue, Reason: "RateLimited",
		Message: fmt.Sprintf("%d namespace(s) have to leave this target and wait for the eviction rate limit (--placement-eviction-rate: one target per %s); the next target may start at %s",
			n, c.limiter.every, until.UTC().Format(time.RFC3339))}
	if prev != nil && prev.Status == cond.Status && prev.Message == cond.Message {
		return false
	}
	before := append([]metav1.Condition(nil), obj.Status.Conditions...)
	meta.SetStatusCondition(&obj.Status.Conditions, cond)
	return !equality.Semantic.DeepEqual(before, obj.Status.Conditions)
}
