package workspace

import (
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// delete removes the child workspaces, then all data of the child cluster,
// then the finalizer.
func (r *reconciler) delete(ctx context.Context, parent, child logicalcluster.Name, ws *unstructured.Unstructured) (time.Duration, error) {
	if !slices.Contains(ws.GetFinalizers(), tenancy.WorkspaceFinalizer) {
		return 0, nil
	}
	if phase, _, _ := unstructured.NestedString(ws.Object, "status", "phase"); phase != tenancy.PhaseTerminating {
		if err := r.setStatus(ctx, parent, ws, tenancy.PhaseTerminating, "", "deleting the logical cluster"); err != nil {
			return 0, err
		}
	}
	if again, err := r.deleteCluster(ctx, child); again != 0 || err != nil {
		return again, err
	}
	return r.removeFinalizer(ctx, parent, ws)
}

// deleteCluster closes the child cluster (Terminating), deletes its child
// workspaces and, once they are gone, every object it stores. A non-zero
// delay means: come back later, children are still being deleted.
func (r *reconciler) deleteCluster(ctx context.Context, child logicalcluster.Name) (time.Duration, error) {
	cc, err := r.clients(child)
	if err != nil {
		return 0, err
	}
	if err := markTerminating(ctx, cc); err != nil {
		return 0, err
	}
	if again, err := deleteChildren(ctx, cc); again != 0 || err != nil {
		return again, err
	}
	n, err := r.deleteClusterData(ctx, child)
	if err != nil {
		return 0, err
	}
	klog.InfoS("deleted logical cluster", "cluster", child, "objects", n)
	return 0, nil
}

// deleteChildren deletes the child workspaces of a cluster; a non-zero
// delay means some are still there.
func deleteChildren(ctx context.Context, cc *clients) (time.Duration, error) {
	children, err := cc.dynamic.Resource(tenancy.WorkspacesResource).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return 0, err
	}
	if children == nil || len(children.Items) == 0 {
		return 0, nil
	}
	for _, c := range children.Items {
		if c.GetDeletionTimestamp() == nil {
			if err := cc.dynamic.Resource(tenancy.WorkspacesResource).Delete(ctx, c.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return 0, err
			}
		}
	}
	return 200 * time.Millisecond, nil
}

// deleteOrphan deletes the child cluster of a Workspace that is gone
// although its finalizer should have held it (an operator removed the
// finalizer, or the object was deleted some other way): a logical cluster
// without its Workspace must neither stay reachable nor keep the name from
// being used again. Only a LogicalCluster that names this very Workspace
// (parent, name and a UID no Workspace of that name has now) is deleted.
func (r *reconciler) deleteOrphan(ctx context.Context, parent logicalcluster.Name, name string) (time.Duration, error) {
	child, err := logicalcluster.Parse(string(parent.Join(name)))
	if err != nil {
		return 0, nil
	}
	r.stored.forget(child)
	cc, err := r.clients(child)
	if err != nil {
		return 0, err
	}
	lc, err := cc.dynamic.Resource(tenancy.LogicalClustersResource).Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	owner, _, _ := unstructured.NestedStringMap(lc.Object, "spec", "owner")
	if owner["cluster"] != string(parent) || owner["name"] != name || ownedElsewhere(lc, r.self()) {
		return 0, nil
	}
	pc, err := r.clients(parent)
	if err != nil {
		return 0, err
	}
	ws, err := pc.dynamic.Resource(tenancy.WorkspacesResource).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && string(ws.GetUID()) == owner["uid"]:
		return 0, nil // not an orphan: its Workspace is there
	case err != nil && !apierrors.IsNotFound(err):
		return 0, err
	}
	klog.InfoS("deleting a logical cluster whose Workspace is gone", "cluster", child, "workspaceUID", owner["uid"])
	return r.deleteCluster(ctx, child)
}

// markTerminating sets the child's LogicalCluster to Terminating, which
// closes the cluster to everyone but the server and to any create.
func markTerminating(ctx context.Context, cc *clients) error {
	lcs := cc.dynamic.Resource(tenancy.LogicalClustersResource)
	lc, err := lcs.Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if phase, _, _ := unstructured.NestedString(lc.Object, "status", "phase"); phase == tenancy.PhaseTerminating {
		return nil
	}
	if err := unstructured.SetNestedField(lc.Object, tenancy.PhaseTerminating, "status", "phase"); err != nil {
		return err
	}
	_, err = lcs.UpdateStatus(ctx, lc, metav1.UpdateOptions{})
	return err
}
