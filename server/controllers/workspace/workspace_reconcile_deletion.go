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
	cc, err := r.clients(child)
	if err != nil {
		return 0, err
	}
	if err := markTerminating(ctx, cc); err != nil {
		return 0, err
	}
	children, err := cc.dynamic.Resource(tenancy.WorkspacesResource).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return 0, err
	}
	if children != nil && len(children.Items) > 0 {
		for _, c := range children.Items {
			if c.GetDeletionTimestamp() == nil {
				if err := cc.dynamic.Resource(tenancy.WorkspacesResource).Delete(ctx, c.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return 0, err
				}
			}
		}
		return 200 * time.Millisecond, nil
	}
	n, err := r.deleteClusterData(ctx, child)
	if err != nil {
		return 0, err
	}
	klog.InfoS("deleted logical cluster", "cluster", child, "objects", n)

	pc, err := r.clients(parent)
	if err != nil {
		return 0, err
	}
	latest, err := pc.dynamic.Resource(tenancy.WorkspacesResource).Get(ctx, ws.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	latest.SetFinalizers(slices.DeleteFunc(latest.GetFinalizers(), func(f string) bool { return f == tenancy.WorkspaceFinalizer }))
	_, err = pc.dynamic.Resource(tenancy.WorkspacesResource).Update(ctx, latest, metav1.UpdateOptions{})
	return 0, err
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
