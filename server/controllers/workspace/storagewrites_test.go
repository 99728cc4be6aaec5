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
	"github.com/kcpsql/kcp/storage/embeddedkine"
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
	// A new cluster: its LogicalCluster and namespaces in one transaction;
	// a namespace left from before (no LogicalCluster) is kept.
	leftover := []byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kube-public","uid":"old"}}`)
	if _, _, err := k.CreateKey(ctx, "/registry/core/namespaces/root:b/kube-public", leftover); err != nil {
		t.Fatal(err)
	}
	got, nsStored, err := r.storeCluster(ctx, "root:b", lc("ws-1"), DefaultNamespaces...)
	if err != nil || !nsStored {
		t.Fatalf("storeCluster: %v (namespaces stored with it: %v)", err, nsStored)
	}
	phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
	url, _, _ := unstructured.NestedString(got.Object, "status", "URL")
	if phase != tenancy.PhaseReady || url != "https://kcp.example/clusters/root:b" || got.GetGeneration() != 1 || got.GetResourceVersion() == "" {
		t.Errorf("stored LogicalCluster: %v", got.Object)
	}
	if v, rev, _ := k.GetKey(ctx, "/registry/tenancy.kcp.io/logicalclusters/root:b/cluster"); v == nil || strconv.FormatInt(rev, 10) != got.GetResourceVersion() {
		t.Errorf("LogicalCluster stored at %d, storeCluster said %s", rev, got.GetResourceVersion())
	}
	for _, n := range DefaultNamespaces {
		v, _, _ := k.GetKey(ctx, "/registry/core/namespaces/root:b/"+n)
		switch {
		case v == nil:
			t.Errorf("namespace %s not stored with the LogicalCluster", n)
		case n == "kube-public" && string(v) != string(leftover):
			t.Errorf("the namespace left from before was replaced: %s", v)
		case n != "kube-public" && !strings.Contains(string(v), `"phase":"Active"`):
			t.Errorf("namespace %s: %s", n, v)
		}
	}
	// A second LogicalCluster for the key is not stored, the first is
	// answered, and the namespaces are left to the caller (whose they are
	// depends on whose the LogicalCluster is).
	again, nsStored, err := r.storeCluster(ctx, "root:b", lc("ws-2"), DefaultNamespaces...)
	if err != nil || nsStored {
		t.Fatalf("storeCluster again: %v (namespaces stored: %v)", err, nsStored)
	}
	if uid, _, _ := unstructured.NestedString(again.Object, "spec", "owner", "uid"); uid != "ws-1" || again.GetUID() != got.GetUID() || again.GetResourceVersion() != got.GetResourceVersion() {
		t.Errorf("a second LogicalCluster replaced the first: owner %s uid %s rv %s, want ws-1 %s %s", uid, again.GetUID(), again.GetResourceVersion(), got.GetUID(), got.GetResourceVersion())
	}
	// A cluster being deleted gets no namespaces.
	if _, nsStored, err := r.storeCluster(ctx, "root:gone", lc("ws-3"), DefaultNamespaces...); err != nil || nsStored {
		t.Errorf("storeCluster into a cluster being deleted: %v, namespaces stored: %v", err, nsStored)
	}
	if v, _, _ := k.GetKey(ctx, "/registry/core/namespaces/root:gone/kube-system"); v != nil {
		t.Errorf("stored into a cluster being deleted: %s", v)
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

// countingStorage counts the creating writes that reach the storage layer:
// a create of one key, or of several in one transaction.
type countingStorage struct {
	Storage
	creates int
}

func (c *countingStorage) CreateKey(ctx context.Context, key string, value []byte) (int64, bool, error) {
	c.creates++
	return c.Storage.CreateKey(ctx, key, value)
}

func (c *countingStorage) CreateKeys(ctx context.Context, kvs []embeddedkine.KeyValue) ([]int64, bool, error) {
	c.creates++
	return c.Storage.CreateKeys(ctx, kvs)
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
		if storage.creates != 1 {
			t.Fatalf("look %d: %d creating writes reached the storage layer, want the 1 of the first look (LogicalCluster and 3 namespaces in one)", look, storage.creates)
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
	// Storing again: the LogicalCluster is there, so the one transaction
	// writes nothing, and each namespace is created where it is missing.
	if storage.creates != 5 {
		t.Fatalf("after ten seconds: %d creating writes, want 5 (the objects stored again once: 1 + 4)", storage.creates)
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
	if phase, _, _ := unstructured.NestedString(back.Object, "status", "phase"); phase != tenancy.PhaseReady || storage.creates != 9 {
		t.Errorf("once routed: phase %q after %d creating writes, want Ready after 9", phase, storage.creates)
	}
	if r.stored.has("root:a", "ws-1") {
		t.Error("a Ready workspace is still remembered")
	}
}
