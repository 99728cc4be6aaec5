package workspace

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/keys"
)

// storedPrefix is where Workspaces are stored, in every cluster.
var storedPrefix = keys.Prefix + keys.ResourcePrefix(tenancy.WorkspacesResource.GroupResource()) + "/"

// listStored lists the stored Workspaces of every cluster for the
// controller's informer (and the garbage collector's cache it feeds), as
// storedObject reads them. The list's resourceVersion is the revision it
// was read at; the watch (watchStored) starts there.
func listStored(ctx context.Context, rangeFn clusterinformer.RangeFunc) (*unstructured.UnstructuredList, error) {
	return clusterinformer.ListStored(ctx, rangeFn, storedPrefix, tenancy.Group+"/"+tenancy.Version, "WorkspaceList", storedObject)
}

// watchStored watches the stored Workspaces of every cluster from a list's
// resourceVersion, each change's Workspace as storedObject reads it.
func watchStored(ctx context.Context, watchFn clusterinformer.WatchFunc, o metav1.ListOptions) (watch.Interface, error) {
	return clusterinformer.WatchStored(ctx, watchFn, storedPrefix, o, storedObject)
}

// storedObject is a stored Workspace as the controller reads it. A Ready
// Workspace (the great majority) becomes an object with what the caches
// read of it: name, UID, finalizers, owner references, spec.limits,
// spec.frozen, spec.shard and status.phase (clusterinformer.ListStored and WatchStored add the
// resourceVersion, the row's revision, and the cluster, from the key, as
// the API server sets it). Any other Workspace is decoded whole, as the
// API server serves it (the Workspace CRD has no defaults to apply on
// read), because the controller works on it.
func storedObject(key string, value []byte) (*unstructured.Unstructured, error) {
	ws, err := tenancy.DecodeStored("Workspace", key, value)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if ws.Metadata.DeletionTimestamp != nil || ws.Status.Phase != tenancy.PhaseReady ||
		!slices.Contains(ws.Metadata.Finalizers, tenancy.WorkspaceFinalizer) {
		if err := u.UnmarshalJSON(value); err != nil {
			return nil, fmt.Errorf("reading the Workspace stored at %s: %w", key, err)
		}
		return u, nil
	}
	u.Object = map[string]interface{}{"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "Workspace"}
	u.SetName(ws.Metadata.Name)
	u.SetUID(ws.Metadata.UID)
	u.SetFinalizers(ws.Metadata.Finalizers)
	u.SetOwnerReferences(ws.Metadata.OwnerReferences)
	spec := map[string]interface{}{}
	if l := ws.Spec.Limits; l != (tenancy.Limits{}) {
		spec["limits"] = map[string]interface{}{"objects": l.Objects, "bytes": l.Bytes}
	}
	if f := ws.Spec.Frozen; f != nil {
		spec["frozen"] = map[string]interface{}{"reason": f.Reason}
	}
	if ws.Spec.Shard != "" {
		spec["shard"] = ws.Spec.Shard
	}
	if len(spec) > 0 {
		u.Object["spec"] = spec
	}
	u.Object["status"] = map[string]interface{}{"phase": ws.Status.Phase}
	return u, nil
}
