package workspace

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/keys"
)

// storedPrefix is where Workspaces are stored, in every cluster.
var storedPrefix = keys.Prefix + keys.ResourcePrefix(tenancy.WorkspacesResource.GroupResource()) + "/"

// listStored lists the stored Workspaces of every cluster for the
// controller's informer (and the garbage collector's cache it feeds). A
// Ready Workspace (the great majority) becomes an object with what the
// caches read of it: name, UID, resourceVersion (the row's revision), the
// cluster (from the key, as the API server sets it), finalizers, owner
// references, spec.limits and status.phase. Any other Workspace is decoded
// whole, as the API server serves it (the Workspace CRD has no defaults to
// apply on read), because the controller works on it. The list's
// resourceVersion is the revision it was read at; the watch starts there.
func listStored(ctx context.Context, rangeFn clusterinformer.RangeFunc) (*unstructured.UnstructuredList, error) {
	return clusterinformer.ListStored(ctx, rangeFn, storedPrefix, tenancy.Group+"/"+tenancy.Version, "WorkspaceList",
		func(key string, value []byte) (*unstructured.Unstructured, error) {
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
			if l := ws.Spec.Limits; l != (tenancy.Limits{}) {
				u.Object["spec"] = map[string]interface{}{"limits": map[string]interface{}{"objects": l.Objects, "bytes": l.Bytes}}
			}
			u.Object["status"] = map[string]interface{}{"phase": ws.Status.Phase}
			return u, nil
		})
}
