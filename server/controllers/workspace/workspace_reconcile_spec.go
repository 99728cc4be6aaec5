package workspace

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/conditions"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// copied is what the controller copies from a Workspace's spec to its
// LogicalCluster's: the limits and the freeze (its reason, "" when not
// frozen).
type copied struct {
	limits tenancy.Limits
	frozen string
}

// copiedOf reads the copied fields of a Workspace or LogicalCluster.
func copiedOf(u *unstructured.Unstructured) copied {
	return copied{limits: logicalclusters.LimitsOf(u, "spec", "limits"), frozen: logicalclusters.FrozenOf(u, "spec", "frozen")}
}

// set writes c into a LogicalCluster's spec, removing what is not set.
func (c copied) set(lc *unstructured.Unstructured) {
	if c.limits == (tenancy.Limits{}) {
		unstructured.RemoveNestedField(lc.Object, "spec", "limits")
	} else {
		_ = unstructured.SetNestedField(lc.Object, map[string]interface{}{"objects": c.limits.Objects, "bytes": c.limits.Bytes}, "spec", "limits")
	}
	if c.frozen == "" {
		unstructured.RemoveNestedField(lc.Object, "spec", "frozen")
	} else {
		_ = unstructured.SetNestedField(lc.Object, map[string]interface{}{"reason": c.frozen}, "spec", "frozen")
	}
}

// differs reports whether a Workspace's copied fields differ from what its
// LogicalCluster has (as the shared watch of LogicalClusters sees it).
func (r *reconciler) differs(child logicalcluster.Name, want copied) bool {
	return (r.limits != nil && r.limits(child) != want.limits) || (r.frozen != nil && r.frozen(child) != want.frozen)
}

// syncSpec copies a ready Workspace's spec.limits and spec.frozen to its
// LogicalCluster when they differ from what the LogicalCluster has (no
// read unless something changed). A change of the freeze is reported in
// the Workspace's Frozen condition first, then copied: the condition
// never says frozen for longer than the cluster is (the copy that fails
// is retried, and the condition is then written already).
func (r *reconciler) syncSpec(ctx context.Context, parent logicalcluster.Name, name string, child logicalcluster.Name, want copied) error {
	if !r.differs(child, want) {
		return nil
	}
	if r.frozen != nil && r.frozen(child) != want.frozen {
		if err := r.reportFrozen(ctx, parent, name, want.frozen); err != nil {
			return err
		}
	}
	cc, err := r.clients(child)
	if err != nil {
		return err
	}
	return copyToLogicalCluster(ctx, cc, want)
}

// copyToLogicalCluster writes want into the cluster's LogicalCluster
// unless it has it already (copied earlier; the registry, or this shard,
// has not seen it yet).
func copyToLogicalCluster(ctx context.Context, cc *clients, want copied) error {
	lcs := cc.dynamic.Resource(tenancy.LogicalClustersResource)
	lc, err := lcs.Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if copiedOf(lc) == want {
		return nil
	}
	want.set(lc)
	_, err = lcs.Update(ctx, lc, metav1.UpdateOptions{})
	return err
}

// reportFrozen sets the Workspace's Frozen condition: True with the reason
// as message while frozen, none otherwise.
func (r *reconciler) reportFrozen(ctx context.Context, parent logicalcluster.Name, name, reason string) error {
	pc, err := r.clients(parent)
	if err != nil {
		return err
	}
	ws, err := pc.dynamic.Resource(tenancy.WorkspacesResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c, found := conditions.Find(ws, tenancy.ConditionFrozen)
	if (reason == "" && !found) || (reason != "" && found && c.Status == string(metav1.ConditionTrue) && c.Message == reason) {
		return nil
	}
	conds, _, _ := unstructured.NestedSlice(ws.Object, "status", "conditions")
	out := make([]interface{}, 0, len(conds)+1)
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == tenancy.ConditionFrozen {
			continue
		}
		out = append(out, c)
	}
	if reason != "" {
		out = append(out, frozenCondition(reason))
	}
	if err := unstructured.SetNestedSlice(ws.Object, out, "status", "conditions"); err != nil {
		return err
	}
	return r.storeStatus(ctx, parent, ws)
}

// frozenCondition is the Frozen condition of a frozen Workspace.
func frozenCondition(reason string) map[string]interface{} {
	return map[string]interface{}{
		"type": tenancy.ConditionFrozen, "status": string(metav1.ConditionTrue), "reason": "Frozen", "message": reason,
		"lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z"),
	}
}
