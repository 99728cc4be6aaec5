package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/keys"
)

// storedPrefix is where Workspaces are stored, in every cluster.
var storedPrefix = keys.Prefix + keys.ResourcePrefix(tenancy.WorkspacesResource.GroupResource()) + "/"

// storedWorkspace is what the first look at a stored Workspace reads; the
// decoder skips the rest (managed fields are most of the bytes).
type storedWorkspace struct {
	Metadata struct {
		Name              string                  `json:"name"`
		UID               types.UID               `json:"uid"`
		DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
		Finalizers        []string                `json:"finalizers"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		Limits tenancy.Limits `json:"limits"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

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
			var ws storedWorkspace
			if err := json.Unmarshal(value, &ws); err != nil {
				return nil, fmt.Errorf("reading the Workspace stored at %s: %w", key, err)
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
