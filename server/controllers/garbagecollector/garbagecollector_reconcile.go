package garbagecollector

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

type reconciler struct {
	clientFor   func(logicalcluster.Name) (metadata.Interface, error)
	resourceFor func(schema.GroupVersionKind) *resourceInfo
	// servedVersion names a version of a custom kind that the cluster's own
	// CRD serves (ok false for kinds no CRD of the cluster defines).
	servedVersion func(cluster logicalcluster.Name, group, kind string) (string, bool)
	dependents    func(logicalcluster.Name, types.UID) []item
	get           func(item) *metav1.PartialObjectMetadata
}

func hasGCFinalizer(m *metav1.PartialObjectMetadata) bool {
	return slices.Contains(m.Finalizers, metav1.FinalizerOrphanDependents) || slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents)
}

// ownerExists reads the owner of ref directly in the dependent's cluster.
// An owner of a kind nobody serves cannot be confirmed gone: it is kept.
func (r *reconciler) ownerExists(ctx context.Context, cluster logicalcluster.Name, client metadata.Interface, namespace string, ref metav1.OwnerReference) (bool, error) {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	ri := r.resourceFor(gvk)
	if ri == nil {
		return true, nil
	}
	if !ri.namespaced {
		namespace = ""
	}
	gvr := ri.gvr
	if r.servedVersion != nil {
		// Clusters define custom kinds with versions of their own: read the
		// owner at a version its cluster serves, or a 404 for an unserved
		// version would pass for a missing owner.
		if v, ok := r.servedVersion(cluster, gvk.Group, gvk.Kind); ok {
			gvr.Version = v
		}
	}
	got, err := client.Resource(gvr).Namespace(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return got.UID == ref.UID, nil
}

// processDependent deletes a dependent whose owners are all gone, or drops
// the references to the owners that are gone.
func (r *reconciler) processDependent(ctx context.Context, ri *resourceInfo, it item) error {
	m := r.get(it)
	if m == nil || len(m.OwnerReferences) == 0 || m.DeletionTimestamp != nil {
		return nil
	}
	client, err := r.clientFor(it.cluster)
	if err != nil {
		return err
	}
	var alive []metav1.OwnerReference
	for _, ref := range m.OwnerReferences {
		ok, err := r.ownerExists(ctx, it.cluster, client, m.Namespace, ref)
		if err != nil {
			return err
		}
		if ok {
			alive = append(alive, ref)
		}
	}
	res := client.Resource(ri.gvr).Namespace(m.Namespace)
	switch {
	case len(alive) == len(m.OwnerReferences):
		return nil
	case len(alive) == 0:
		background := metav1.DeletePropagationBackground
		err := res.Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID}, PropagationPolicy: &background})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	default:
		return r.setOwners(ctx, res, m, alive)
	}
}

// processOwner finishes an owner deleted with the orphan or foreground
// finalizer.
func (r *reconciler) processOwner(ctx context.Context, ri *resourceInfo, it item) (time.Duration, error) {
	client, err := r.clientFor(it.cluster)
	if err != nil {
		return 0, err
	}
	res := client.Resource(ri.gvr).Namespace(it.namespace)
	owner, err := res.Get(ctx, it.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if owner.DeletionTimestamp == nil {
		return 0, nil
	}
	deps := r.dependents(it.cluster, owner.UID)
	switch {
	case slices.Contains(owner.Finalizers, metav1.FinalizerOrphanDependents):
		for _, d := range deps {
			dm := r.get(d)
			if dm == nil {
				continue
			}
			keep := slices.DeleteFunc(slices.Clone(dm.OwnerReferences), func(o metav1.OwnerReference) bool { return o.UID == owner.UID })
			dc, _ := r.clientFor(d.cluster)
			if err := r.setOwners(ctx, dc.Resource(d.gvr).Namespace(d.namespace), dm, keep); err != nil && !apierrors.IsNotFound(err) {
				return 0, err
			}
		}
		return 0, r.dropFinalizer(ctx, res, owner, metav1.FinalizerOrphanDependents)
	case slices.Contains(owner.Finalizers, metav1.FinalizerDeleteDependents):
		if len(deps) == 0 {
			return 0, r.dropFinalizer(ctx, res, owner, metav1.FinalizerDeleteDependents)
		}
		foreground := metav1.DeletePropagationForeground
		for _, d := range deps {
			dm := r.get(d)
			if dm == nil || dm.DeletionTimestamp != nil {
				continue
			}
			dc, _ := r.clientFor(d.cluster)
			err := dc.Resource(d.gvr).Namespace(d.namespace).Delete(ctx, d.name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &dm.UID}, PropagationPolicy: &foreground})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return 0, err
			}
		}
		return 500 * time.Millisecond, nil
	}
	return 0, nil
}

// setOwners replaces the ownerReferences of m, if m is still the same object
// at the same resourceVersion.
func (r *reconciler) setOwners(ctx context.Context, res metadata.ResourceInterface, m *metav1.PartialObjectMetadata, owners []metav1.OwnerReference) error {
	if owners == nil {
		owners = []metav1.OwnerReference{}
	}
	patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"uid": m.UID, "resourceVersion": m.ResourceVersion, "ownerReferences": owners,
	}})
	if err != nil {
		return err
	}
	_, err = res.Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (r *reconciler) dropFinalizer(ctx context.Context, res metadata.ResourceInterface, m *metav1.PartialObjectMetadata, f string) error {
	keep := slices.DeleteFunc(slices.Clone(m.Finalizers), func(x string) bool { return x == f })
	if keep == nil {
		keep = []string{}
	}
	patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"uid": m.UID, "resourceVersion": m.ResourceVersion, "finalizers": keep,
	}})
	if err != nil {
		return err
	}
	_, err = res.Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
