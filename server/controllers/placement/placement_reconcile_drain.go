package placement

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// A drain that tells the truth: while a SyncTarget drains, every namespace
// still assigned to it is either moving (its replacement starts on another
// target; the copy here stays until that is Available) or stuck (its
// Placement selects no other usable target, so it stays, since a drain never
// leaves a namespace nowhere). The namespace reconcile records which, and
// why; a writer puts the tally into the SyncTarget's status.drain (every
// 2 s at most, scanning the namespaces only while a target drains), where
// kubectl kcp workload drain --wait and kubectl get read it.

// drainEntry is one namespace on a draining target.
type drainEntry struct {
	stuck  bool
	reason string
}

// drains tallies the namespaces of draining targets.
type drains struct {
	mu sync.Mutex
	// byTarget: target ref (location/name) -> namespace key -> entry.
	byTarget map[string]map[string]drainEntry
}

func newDrains() *drains {
	return &drains{byTarget: map[string]map[string]drainEntry{}}
}

// set records the draining targets a namespace is still on (and forgets
// it on every other target).
func (d *drains) set(nsKey string, entries map[string]drainEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ref, m := range d.byTarget {
		if _, keep := entries[ref]; !keep {
			delete(m, nsKey)
		}
	}
	for ref, e := range entries {
		m := d.byTarget[ref]
		if m == nil {
			m = map[string]drainEntry{}
			d.byTarget[ref] = m
		}
		m[nsKey] = e
	}
}

// recordDrain notes where a namespace stands on the targets it should
// leave: chosen ones that drain, or whose NoExecute taint its Placement no
// longer tolerates (NotReady ones included), keep it for want of another
// (stuck, why); leaving ones wait for its replacement (moving, why).
func (c *Controller) recordDrain(cluster logicalcluster.Name, ns string, p *workload.Placement, chosen, leaving []target, why string) {
	entries := map[string]drainEntry{}
	pl := "no Placement"
	if p != nil {
		pl = "Placement " + p.Name
	}
	for _, t := range chosen {
		var reason string
		switch {
		case p != nil && p.Spec.Suspends(t.obj.Name):
			if t.obj.Spec.Drain {
				reason = pl + " is suspended for this SyncTarget: nothing moves until it is resumed"
			}
		case t.obj.Spec.Drain:
			reason = pl + " selects no other usable SyncTarget (a drain never leaves a namespace nowhere)"
		case t.stayed:
			reason = c.stuckOnTaint(cluster, p, pl, t)
		}
		if reason != "" {
			entries[t.ref()] = drainEntry{stuck: true, reason: reason}
		}
	}
	for _, t := range leaving {
		if why == "" {
			why = "its replacement is starting"
		}
		entries[t.ref()] = drainEntry{reason: "moving: " + why}
	}
	c.drains.set(clusterinformer.Key(cluster, "", ns), entries)
}

// stuckOnTaint says why a namespace stays on a target it should have left
// (choose kept it there, for want of another usable target): a NoExecute
// taint its Placement does not tolerate (any more), NotReady included.
func (c *Controller) stuckOnTaint(cluster logicalcluster.Name, p *workload.Placement, pl string, t target) string {
	var tols []workload.Toleration
	if p != nil {
		tols = p.Spec.Tolerations
	}
	_, taint, ok := workload.EvictionAt(tols, taintsOf(t.obj), string(cluster), map[string]time.Duration{workload.TaintNotReady: c.evictionDelay})
	if !ok {
		return pl + " selects no other usable SyncTarget"
	}
	if taint.Key == workload.TaintNotReady {
		return pl + " selects no other usable SyncTarget to fail over to (this one is NotReady)"
	}
	return fmt.Sprintf("%s does not tolerate the taint %s:%s, and selects no other usable SyncTarget", pl, taint.Key, taint.Effect)
}

// writeDrains writes the tallies of draining targets, and the
// EvictionRateLimited condition of targets whose evictions wait, into
// their status until ctx ends.
func (c *Controller) writeDrains(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for _, o := range c.targets.List() {
			u := o.(*unstructured.Unstructured)
			ref := string(clusterinformer.ClusterOf(u)) + "/" + u.GetName()
			if err := c.writeDrain(ctx, u, ref); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				klog.V(2).InfoS("writing a drain's status", "syncTarget", ref, "err", err)
			}
		}
	}, 2*time.Second)
}

func (c *Controller) writeDrain(ctx context.Context, u *unstructured.Unstructured, ref string) error {
	obj, err := decodeTarget(u)
	if err != nil {
		return nil
	}
	c.drains.mu.Lock()
	entries := c.drains.byTarget[ref]
	stuck := false
	for _, e := range entries {
		stuck = stuck || e.stuck
	}
	c.drains.mu.Unlock()
	// The status shows while the target drains, or while namespaces stay
	// that a NoExecute taint should have moved (stuck).
	evacuating := obj.Spec.Drain || stuck
	var assigned []string
	if evacuating {
		// What the namespaces say is the truth of what is assigned; the
		// tally says why each is still there.
		label := workload.StateLabel(string(clusterinformer.ClusterOf(u)), u.GetName())
		for _, o := range c.namespaces.List() {
			if ns, ok := o.(*corev1.Namespace); ok && ns.Labels[label] == workload.StateSync && ns.DeletionTimestamp == nil {
				assigned = append(assigned, clusterinformer.Key(clusterinformer.ClusterOf(ns), "", ns.Name))
			}
		}
		sort.Strings(assigned)
	}
	c.drains.mu.Lock()
	entries = c.drains.byTarget[ref]
	var want *workload.DrainStatus
	if evacuating {
		want = &workload.DrainStatus{Namespaces: len(assigned)}
		for _, k := range assigned {
			e, ok := entries[k]
			if !ok && !obj.Spec.Drain {
				continue // not stuck: it stays by its Placement's choice
			}
			if !ok {
				e = drainEntry{reason: "moving: not looked at since the drain began"}
			}
			if e.stuck {
				want.Stuck++
			} else {
				want.Moving++
			}
			if len(want.Blocked) < workload.MaxDrainBlocked {
				cl, _, name, _ := clusterinformer.SplitKey(k)
				want.Blocked = append(want.Blocked, workload.DrainBlock{Workspace: string(cl), Namespace: name, Reason: e.reason})
			}
		}
		if !obj.Spec.Drain {
			want.Namespaces = want.Stuck + want.Moving
		}
		want.Message = drainMessage(want)
	} else if len(entries) > 0 {
		delete(c.drains.byTarget, ref)
	}
	c.drains.mu.Unlock()
	condChanged := c.writeEvictionCondition(time.Now(), ref, obj)
	if equality.Semantic.DeepEqual(obj.Status.Drain, want) && !condChanged {
		return nil
	}
	obj.Status.Drain = want
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&obj.Status)
	if err != nil {
		return err
	}
	out := u.DeepCopy()
	out.Object["status"] = st
	d, err := c.clients.Dynamic(clusterinformer.ClusterOf(u))
	if err != nil {
		return err
	}
	_, err = d.Resource(workload.SyncTargetsResource).UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

func drainMessage(d *workload.DrainStatus) string {
	if d.Namespaces == 0 {
		return "drained: no namespace is assigned to this target"
	}
	var parts []string
	if d.Moving > 0 {
		parts = append(parts, fmt.Sprintf("%d moving (each copy here stays until its replacement is Available)", d.Moving))
	}
	if d.Stuck > 0 {
		parts = append(parts, fmt.Sprintf("%d cannot move: their Placement selects no other usable SyncTarget; add or uncordon one, or change the Placement (or, for a taint, its tolerations)", d.Stuck))
	}
	return fmt.Sprintf("%d namespaces still here: %s", d.Namespaces, strings.Join(parts, "; "))
}
