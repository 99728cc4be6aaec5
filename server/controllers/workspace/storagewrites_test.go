package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestStorageWrites: what the controller writes through the storage layer
// (a real kine on SQLite): namespaces and a LogicalCluster are created once
// and left alone when they exist, a Workspace's status is written only over
// the version the controller read and changes nothing else, and nothing is
// written into a cluster that is being deleted.
func TestStorageWrites(t *testing.T) {
	k := kinetest.Start(t, datastoretest.SQLiteDSN(t))
	ctx := context.Background()
	terminating := map[logicalcluster.Name]bool{"root:gone": true}
	r := &reconciler{serverURL: "https://kcp.example", storage: k,
		clusterState: func(c logicalcluster.Name) (bool, bool) { return true, terminating[c] }}

	// Namespaces: created once; a second pass keeps the first ones.
	if err := r.storeNamespaces(ctx, "root:a", DefaultNamespaces...); err != nil {
		t.Fatal(err)
	}
	first, _, _ := k.GetKey(ctx, "/registry/core/namespaces/root:a/default")
	var ns struct {
		Kind, APIVersion string
		Metadata         struct {
			Name, UID, CreationTimestamp string
			Labels, Annotations          map[string]string
		}
		Spec   struct{ Finalizers []string }
		Status struct{ Phase string }
	}
	if err := json.Unmarshal(first, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Kind != "Namespace" || ns.APIVersion != "v1" || ns.Metadata.Name != "default" || ns.Metadata.UID == "" || ns.Metadata.CreationTimestamp == "" ||
		ns.Metadata.Labels["kubernetes.io/metadata.name"] != "default" || ns.Metadata.Annotations[logicalcluster.Annotation] != "root:a" ||
		len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != "kubernetes" || ns.Status.Phase != "Active" || strings.Contains(string(first), "resourceVersion") {
		t.Errorf("stored namespace: %s", first)
	}
	if err := r.storeNamespaces(ctx, "root:a", DefaultNamespaces...); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := k.GetKey(ctx, "/registry/core/namespaces/root:a/default"); string(again) != string(first) {
		t.Errorf("a second pass replaced the namespace:\n%s\n%s", first, again)
	}
	for _, n := range []string{"kube-system", "kube-public"} {
		if v, _, _ := k.GetKey(ctx, "/registry/core/namespaces/root:a/"+n); v == nil {
			t.Errorf("namespace %s not stored", n)
		}
	}
	if err := r.storeNamespaces(ctx, "root:gone", "default"); err == nil {
		t.Error("namespaces were written into a cluster being deleted")
	}
	if v, _, _ := k.GetKey(ctx, "/registry/core/namespaces/root:gone/default"); v != nil {
		t.Errorf("stored into a cluster being deleted: %s", v)
	}

	// LogicalCluster: stored Ready; a second one for the key is not stored,
	// the first is answered.
	lc := func(uid string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "LogicalCluster",
			"metadata": map[string]interface{}{"name": tenancy.LogicalClusterName},
			"spec":     map[string]interface{}{"owner": map[string]interface{}{"cluster": "root", "name": "a", "uid": uid}},
		}}
	}
	got, err := r.storeLogicalCluster(ctx, "root:a", lc("ws-1"))
	if err != nil {
		t.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
	url, _, _ := unstructured.NestedString(got.Object, "status", "URL")
	if phase != tenancy.PhaseReady || url != "https://kcp.example/clusters/root:a" || got.GetGeneration() != 1 || got.GetResourceVersion() == "" {
		t.Errorf("stored LogicalCluster: %v", got.Object)
	}
	again, err := r.storeLogicalCluster(ctx, "root:a", lc("ws-2"))
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := unstructured.NestedString(again.Object, "spec", "owner", "uid"); uid != "ws-1" || again.GetUID() != got.GetUID() {
		t.Errorf("a second LogicalCluster replaced the first: owner %s uid %s, want ws-1 %s", uid, again.GetUID(), got.GetUID())
	}

	// Workspace status: over the version read only; nothing else changes.
	key := "/registry/tenancy.kcp.io/workspaces/root/a"
	stored := `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":"a","uid":"ws-1","finalizers":["tenancy.kcp.io/workspace"],"annotations":{"kcp.io/cluster":"root"}},"spec":{"limits":{"objects":7}}}`
	rev, exists, err := k.CreateKey(ctx, key, []byte(stored))
	if err != nil || exists {
		t.Fatal(err, exists)
	}
	ws := &unstructured.Unstructured{}
	if err := ws.UnmarshalJSON([]byte(stored)); err != nil {
		t.Fatal(err)
	}
	stale := ws.DeepCopy()
	stale.SetResourceVersion(strconv.FormatInt(rev-1, 10))
	stale.Object["status"] = map[string]interface{}{"phase": "Stale"}
	if err := r.storeStatus(ctx, "root", stale); !apierrors.IsConflict(err) {
		t.Errorf("status over a stale version: %v, want a conflict", err)
	}
	ws.SetResourceVersion(strconv.FormatInt(rev, 10))
	ws.Object["status"] = map[string]interface{}{"phase": tenancy.PhaseReady}
	ws.Object["spec"] = map[string]interface{}{"limits": map[string]interface{}{"objects": int64(99)}} // not the controller's to write
	if err := r.storeStatus(ctx, "root", ws); err != nil {
		t.Fatal(err)
	}
	value, newRev, _ := k.GetKey(ctx, key)
	back := &unstructured.Unstructured{}
	if err := back.UnmarshalJSON(value); err != nil {
		t.Fatal(err)
	}
	objects, _, _ := unstructured.NestedInt64(back.Object, "spec", "limits", "objects")
	phase, _, _ = unstructured.NestedString(back.Object, "status", "phase")
	if phase != tenancy.PhaseReady || objects != 7 || len(back.GetFinalizers()) != 1 || newRev <= rev || ws.GetResourceVersion() != strconv.FormatInt(newRev, 10) {
		t.Errorf("after the status write: %s at %d (the controller's copy at %s)", value, newRev, ws.GetResourceVersion())
	}
	gone := ws.DeepCopy()
	gone.SetName("b")
	if err := r.storeStatus(ctx, "root", gone); !apierrors.IsNotFound(err) {
		t.Errorf("status of a Workspace that is not stored: %v, want not found", err)
	}
}

// countingStorage counts the creates that reach the storage layer.
type countingStorage struct {
	Storage
	creates int
}

func (c *countingStorage) CreateKey(ctx context.Context, key string, value []byte) (int64, bool, error) {
	c.creates++
	return c.Storage.CreateKey(ctx, key, value)
}

// TestNewWorkspaceStoredOnceWhileTheRegistryCatchesUp: a new Workspace's
// LogicalCluster and namespaces are stored on the first look; while the
// registry has not routed the cluster yet the controller looks again and
// only asks the registry (under load that took a few looks per workspace,
// each storing the four objects again: four turns of SQLite's writer for
// nothing). A wait of over ten seconds stores them again on each look.
// Once routed, the Workspace is Ready. A Workspace of the same name with
// another UID is not taken for the one remembered.
func TestNewWorkspaceStoredOnceWhileTheRegistryCatchesUp(t *testing.T) {
	k := kinetest.Start(t, datastoretest.SQLiteDSN(t))
	ctx := context.Background()
	storage := &countingStorage{Storage: k}
	routed := false
	// A plain new workspace (finalizer set at admission, no type, owner
	// binding served) needs no API request: no clients here.
	r := &reconciler{serverURL: "https://kcp.example", storage: storage, ownerBindingServed: true,
		clients: func(c logicalcluster.Name) (*clients, error) {
			return nil, fmt.Errorf("no clients for %s in this test", c)
		},
		clusterState: func(logicalcluster.Name) (bool, bool) { return routed, false }}

	key := "/registry/tenancy.kcp.io/workspaces/root/a"
	stored := `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":"a","uid":"ws-1","finalizers":["tenancy.kcp.io/workspace"],"annotations":{"kcp.io/cluster":"root"}},"spec":{}}`
	rev, _, err := k.CreateKey(ctx, key, []byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	ws := &unstructured.Unstructured{}
	if err := ws.UnmarshalJSON([]byte(stored)); err != nil {
		t.Fatal(err)
	}
	ws.SetResourceVersion(strconv.FormatInt(rev, 10))
	ws.SetCreationTimestamp(metav1.Now()) // a new workspace: looked at again soon

	for look := 1; look <= 3; look++ {
		after, err := r.reconcile(ctx, "root", ws.DeepCopy())
		if err != nil || after != registryRetry {
			t.Fatalf("look %d before the registry routes the cluster: again after %v, %v; want %v", look, after, err, registryRetry)
		}
		if storage.creates != 4 {
			t.Fatalf("look %d: %d creates reached the storage layer, want the 4 of the first look (LogicalCluster, 3 namespaces)", look, storage.creates)
		}
	}
	for _, n := range DefaultNamespaces {
		if v, _, _ := k.GetKey(ctx, "/registry/core/namespaces/root:a/"+n); v == nil {
			t.Errorf("namespace %s not stored", n)
		}
	}
	if !r.stored.has("root:a", "ws-1") || r.stored.has("root:a", "ws-2") {
		t.Error("the stored workspace is remembered by its UID")
	}

	// A wait of over ten seconds is not the registry's lag: the looks
	// become a second apart and store the objects again (idempotent), in
	// case what was stored is gone.
	old := ws.DeepCopy()
	old.SetCreationTimestamp(metav1.NewTime(time.Now().Add(-11 * time.Second)))
	for look := 1; look <= 2; look++ {
		if after, err := r.reconcile(ctx, "root", old.DeepCopy()); err != nil || after != time.Second {
			t.Fatalf("look %d after ten seconds: again after %v, %v; want 1s", look, after, err)
		}
	}
	if storage.creates != 8 {
		t.Fatalf("after ten seconds: %d creates, want 8 (the objects stored again once)", storage.creates)
	}

	routed = true
	if after, err := r.reconcile(ctx, "root", ws.DeepCopy()); err != nil || after != 0 {
		t.Fatalf("once routed: again after %v, %v", after, err)
	}
	value, _, _ := k.GetKey(ctx, key)
	back := &unstructured.Unstructured{}
	if err := back.UnmarshalJSON(value); err != nil {
		t.Fatal(err)
	}
	// (Nothing is remembered after the long wait: this look stores once
	// more before it sets the Workspace Ready.)
	if phase, _, _ := unstructured.NestedString(back.Object, "status", "phase"); phase != tenancy.PhaseReady || storage.creates != 12 {
		t.Errorf("once routed: phase %q after %d creates, want Ready after 12", phase, storage.creates)
	}
	if r.stored.has("root:a", "ws-1") {
		t.Error("a Ready workspace is still remembered")
	}
}
