package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/storage/keys"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Storage writes keys through the datastore's kine log (embeddedkine.Kine):
// watchers, the watch cache and SQL see these writes as they see the API
// server's.
type Storage interface {
	CreateKey(ctx context.Context, key string, value []byte) (revision int64, exists bool, err error)
	GetKey(ctx context.Context, key string) ([]byte, int64, error)
	UpdateKey(ctx context.Context, key string, value []byte, revision int64) (int64, bool, error)
}

// The controller writes a new workspace's LogicalCluster, namespaces and
// Ready status through the storage layer instead of as requests to the API
// server: objects it alone decides, in a cluster nobody else can write to
// yet. Through the API server each of these writes cost the whole request
// path (authentication, authorization, priority and fairness, admission,
// the encoding of request and answer) for objects none of it applies to; a
// new workspace was six requests, and it is one now (docs/architecture.md).
// A Workspace turns Ready only once the server routes requests to its
// cluster (the registry's state), and nothing is written into a cluster
// that is being deleted.

func keyOf(gr schema.GroupResource, cluster logicalcluster.Name, name string) string {
	return keys.Prefix + keys.ResourcePrefix(gr) + "/" + string(cluster) + "/" + name
}

// stamp gives a new object what the API server gives it on create.
func stamp(m *metav1.ObjectMeta, cluster logicalcluster.Name) {
	m.UID = types.UID(uuid.NewString())
	m.CreationTimestamp = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[logicalcluster.Annotation] = string(cluster)
}

// writable refuses writes into a cluster whose data is being deleted:
// they could land after the deletion swept it.
func (r *reconciler) writable(child logicalcluster.Name) error {
	if _, terminating := r.clusterState(child); terminating {
		return fmt.Errorf("logical cluster %s is being deleted", child)
	}
	return nil
}

// storeLogicalCluster stores lc as the API server would (with its status
// Ready, logicalclusters.StoredReady) unless the key holds one already,
// and returns what the key then holds.
func (r *reconciler) storeLogicalCluster(ctx context.Context, child logicalcluster.Name, lc *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	m := metav1.ObjectMeta{Annotations: lc.GetAnnotations()}
	stamp(&m, child)
	lc.SetAnnotations(m.Annotations)
	lc.SetUID(m.UID)
	lc.SetCreationTimestamp(m.CreationTimestamp)
	lc.SetGeneration(1)
	logicalclusters.StoredReady(r.serverURL)(lc)
	value, err := json.Marshal(lc.Object)
	if err != nil {
		return nil, err
	}
	key := keyOf(tenancy.LogicalClustersResource.GroupResource(), child, tenancy.LogicalClusterName)
	rev, exists, err := r.storage.CreateKey(ctx, key, value)
	if err != nil {
		return nil, fmt.Errorf("storing the LogicalCluster of %s: %w", child, err)
	}
	if exists {
		if value, rev, err = r.storage.GetKey(ctx, key); err != nil || value == nil {
			return nil, fmt.Errorf("reading the LogicalCluster of %s: %v", child, err)
		}
		lc = &unstructured.Unstructured{}
		if err := lc.UnmarshalJSON(value); err != nil {
			return nil, fmt.Errorf("reading the LogicalCluster of %s: %w", child, err)
		}
	}
	lc.SetResourceVersion(strconv.FormatInt(rev, 10))
	return lc, nil
}

// storeNamespaces stores the namespaces as the API server's namespace
// strategy would create them (the name label, the kubernetes finalizer,
// Active) where none is stored yet.
func (r *reconciler) storeNamespaces(ctx context.Context, child logicalcluster.Name, names ...string) error {
	if err := r.writable(child); err != nil {
		return err
	}
	for _, n := range names {
		ns := &corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelMetadataName: n}},
			Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
			Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
		}
		stamp(&ns.ObjectMeta, child)
		value, err := json.Marshal(ns)
		if err != nil {
			return err
		}
		if _, _, err := r.storage.CreateKey(ctx, keyOf(corev1.Resource("namespaces"), child, n), value); err != nil {
			return fmt.Errorf("storing namespace %s of %s: %w", n, child, err)
		}
	}
	return nil
}

// storeStatus writes ws's status into its stored Workspace, as an update
// of the status subresource would: only if the Workspace is still the
// version ws is (a conflict otherwise, and the controller looks again).
func (r *reconciler) storeStatus(ctx context.Context, parent logicalcluster.Name, ws *unstructured.Unstructured) error {
	key := keyOf(tenancy.WorkspacesResource.GroupResource(), parent, ws.GetName())
	value, rev, err := r.storage.GetKey(ctx, key)
	if err != nil {
		return err
	}
	gr := tenancy.WorkspacesResource.GroupResource()
	conflict := apierrors.NewConflict(gr, ws.GetName(), fmt.Errorf("the workspace changed since it was read"))
	if value == nil {
		return apierrors.NewNotFound(gr, ws.GetName())
	}
	if strconv.FormatInt(rev, 10) != ws.GetResourceVersion() {
		return conflict
	}
	stored := &unstructured.Unstructured{}
	if err := stored.UnmarshalJSON(value); err != nil {
		return fmt.Errorf("reading the Workspace stored at %s: %w", key, err)
	}
	stored.Object["status"] = ws.Object["status"]
	value, err = json.Marshal(stored.Object)
	if err != nil {
		return err
	}
	rev, updated, err := r.storage.UpdateKey(ctx, key, value, rev)
	if err != nil {
		return err
	}
	if !updated {
		return conflict
	}
	stored.SetResourceVersion(strconv.FormatInt(rev, 10))
	*ws = *stored
	return nil
}
