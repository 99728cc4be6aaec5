package placement

import (
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/placementexpr"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// The SyncTargets a Placement may use: those of its location workspace
// that its locationSelector and locationExpression select.

type target struct {
	location logicalcluster.Name
	obj      *workload.SyncTarget
	// matches: the Placement's locationSelector selects it and its
	// locationExpression holds (targetsOf).
	matches bool
	// stayed: the namespace should leave it (drain, NoExecute taint,
	// NotReady) but stays, for want of another target (choose).
	stayed bool
	// exprErr: the locationExpression failed for this target (it then
	// does not match).
	exprErr error
}

func (t target) ref() string { return string(t.location) + "/" + t.obj.Name }

func decodeTarget(u *unstructured.Unstructured) (*workload.SyncTarget, error) {
	var t workload.SyncTarget
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t)
	return &t, err
}

// usable: Ready, not cordoned, and its syncer has caught up since it
// started (a cluster back from the dead has deleted its stale copies before
// it counts again).
func usable(t *workload.SyncTarget) bool {
	return meta.IsStatusConditionTrue(t.Status.Conditions, workload.ConditionReady) && !t.Spec.Unschedulable &&
		!meta.IsStatusConditionFalse(t.Status.Conditions, workload.ConditionCaughtUp)
}

// matchingTargets returns the SyncTargets a Placement selects, by name.
func (c *Controller) matchingTargets(p *workload.Placement) []target {
	var out []target
	for _, t := range c.targetsOf(p) {
		if t.matches {
			out = append(out, t)
		}
	}
	return out
}

// targetsOf returns the SyncTargets of a Placement's location workspace,
// by name, each saying whether the Placement's locationSelector selects
// it (a suspended target keeps its namespaces even when it no longer
// does).
func (c *Controller) targetsOf(p *workload.Placement) []target {
	loc, err := logicalcluster.Parse(p.Spec.LocationWorkspace)
	if err != nil {
		return nil
	}
	sel := labels.Everything()
	if p.Spec.LocationSelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(p.Spec.LocationSelector); err != nil {
			sel = labels.Nothing()
		}
	}
	var prg *placementexpr.Program
	var compileErr error
	if p.Spec.LocationExpression != "" {
		prg, compileErr = placementexpr.Cached(p.Spec.LocationExpression)
	}
	objs, _ := c.targets.ByIndex(clusterinformer.ByCluster, string(loc))
	var out []target
	for _, o := range objs {
		t, err := decodeTarget(o.(*unstructured.Unstructured))
		if err != nil || t.DeletionTimestamp != nil {
			continue
		}
		tg := target{location: loc, obj: t, matches: sel.Matches(labels.Set(t.Labels)) && inAGroup(p, t)}
		if tg.matches && p.Spec.LocationExpression != "" {
			// A stored expression that no longer compiles (admission
			// refuses new ones) selects nothing, and says so.
			ok, err := false, compileErr
			if err == nil {
				ok, err = prg.Eval(t)
			}
			tg.matches, tg.exprErr = ok, err
		}
		out = append(out, tg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].obj.Name < out[j].obj.Name })
	return out
}
