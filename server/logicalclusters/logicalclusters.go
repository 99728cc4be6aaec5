// Package logicalclusters knows which logical clusters exist: root always,
// every other one while its LogicalCluster object ("cluster") exists. It is
// one watch across all clusters, shared by the authorizer.
package logicalclusters

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/keys"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Registry answers whether a logical cluster exists. Before Start has synced
// it knows only root.
type Registry struct {
	indexer atomic.Pointer[cache.Indexer]
	stored  clusterinformer.RangeFunc
	watched clusterinformer.WatchFunc
	// onDeleting hears of LogicalClusters being deleted (see OnDeleting).
	onDeleting func(logicalcluster.Name)
	// onMoved hears of LogicalClusters marked moved (see OnMoved).
	onMoved func(logicalcluster.Name)
}

// OnMoved makes the registry call f with every cluster whose
// LogicalCluster carries tenancy.MovedToAnnotation (a move to another
// shard took it over), when it first sees it so. Call before Start.
func (r *Registry) OnMoved(f func(logicalcluster.Name)) { r.onMoved = f }

// OnDeleting makes the registry call f with every cluster whose
// LogicalCluster is being deleted (has a deletionTimestamp: the shard of
// its parent deleted it, and this shard is to delete its data), when it
// first sees it so and again after a restart. Call before Start.
func (r *Registry) OnDeleting(f func(logicalcluster.Name)) { r.onDeleting = f }

// ReadStored makes the registry read LogicalClusters straight from the
// datastore: it lists them with rangeFn and, if watchFn is set, watches
// them with it (otherwise through the API server). Custom resources have
// no watch cache: a list through the API decodes, completes and encodes
// every LogicalCluster and the registry decodes it again, which at 100,000
// workspaces was seconds of every start, on the way to /readyz, and a
// watch through the API costs the same for every change. The registry
// needs five fields of each. Call before Start.
func (r *Registry) ReadStored(rangeFn clusterinformer.RangeFunc, watchFn clusterinformer.WatchFunc) {
	r.stored, r.watched = rangeFn, watchFn
}

// New returns an empty registry.
func New() *Registry { return &Registry{} }

// Start watches LogicalCluster objects in all clusters and returns once the
// registry knows them all (or ctx ends): called from a post-start hook, it
// keeps /readyz from reporting ready while every workspace would still be
// answered "does not exist".
func (r *Registry) Start(ctx context.Context, loopback *rest.Config) error {
	client, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	res := client.Resource(tenancy.LogicalClustersResource)
	lw := clusterinformer.ListWatch(res.List, res.Watch)
	if r.stored != nil {
		watchFn := res.Watch
		if r.watched != nil {
			watchFn = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return clusterinformer.WatchStored(ctx, r.watched, storedPrefix, o, storedObject)
			}
		}
		lw = clusterinformer.ListWatch(func(ctx context.Context, _ metav1.ListOptions) (*unstructured.UnstructuredList, error) {
			return listStored(ctx, r.stored)
		}, watchFn)
	}
	var handler cache.ResourceEventHandler
	if r.onDeleting != nil || r.onMoved != nil {
		seen := func(obj interface{}) {
			e, ok := obj.(*entry)
			if !ok {
				return
			}
			if e.deleting && r.onDeleting != nil {
				r.onDeleting(e.Cluster)
			}
			if e.movedTo != "" && r.onMoved != nil {
				r.onMoved(e.Cluster)
			}
		}
		handler = cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj interface{}) { seen(obj) }}
	}
	indexer, ctrl := clusterinformer.NewTrimmed(lw, &unstructured.Unstructured{}, nil, handler, trim)
	go ctrl.RunWithContext(ctx)
	if clusterinformer.WaitForSync(ctx, ctrl.HasSynced) {
		r.indexer.Store(&indexer)
	}
	return nil
}

// storedPrefix is where LogicalClusters are stored, in every cluster.
var storedPrefix = keys.Prefix + keys.ResourcePrefix(tenancy.LogicalClustersResource.GroupResource()) + "/"

// listStored lists the stored LogicalClusters as the API server would,
// with the fields trim reads (storedObject). The list's resourceVersion is
// the revision it was read at, which the watch then starts from.
func listStored(ctx context.Context, rangeFn clusterinformer.RangeFunc) (*unstructured.UnstructuredList, error) {
	return clusterinformer.ListStored(ctx, rangeFn, storedPrefix, tenancy.Group+"/"+tenancy.Version, "LogicalClusterList", storedObject)
}

// storedObject is a stored LogicalCluster as the registry reads it, listed
// or watched straight from the datastore: the fields trim reads (name,
// UID, owner and restore annotations, spec.limits, spec.frozen and
// status.phase);
// clusterinformer.ListStored and WatchStored add the resourceVersion (the
// row's revision) and the cluster (from the key, as the API server sets
// it).
func storedObject(key string, value []byte) (*unstructured.Unstructured, error) {
	lc, err := tenancy.DecodeStored("LogicalCluster", key, value)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "LogicalCluster",
	}}
	u.SetName(lc.Metadata.Name)
	u.SetUID(lc.Metadata.UID)
	if lc.Metadata.DeletionTimestamp != nil {
		u.SetDeletionTimestamp(lc.Metadata.DeletionTimestamp)
	}
	annotations := map[string]string{}
	for _, a := range []string{tenancy.OwnerAnnotation, tenancy.RestoreAnnotation, tenancy.MoveAnnotation, tenancy.MovedToAnnotation} {
		if v, ok := lc.Metadata.Annotations[a]; ok {
			annotations[a] = v
		}
	}
	if len(annotations) > 0 {
		u.SetAnnotations(annotations)
	}
	spec := map[string]interface{}{}
	if l := lc.Spec.Limits; l != (tenancy.Limits{}) {
		spec["limits"] = map[string]interface{}{"objects": l.Objects, "bytes": l.Bytes}
	}
	if f := lc.Spec.Frozen; f != nil {
		spec["frozen"] = map[string]interface{}{"reason": f.Reason}
	}
	if sh := lc.Spec.Owner.Shard; sh != "" {
		spec["owner"] = map[string]interface{}{"shard": sh}
	}
	if len(spec) > 0 {
		u.Object["spec"] = spec
	}
	if lc.Status.Phase != "" {
		u.Object["status"] = map[string]interface{}{"phase": lc.Status.Phase}
	}
	return u, nil
}

// entry is what the registry keeps of a LogicalCluster: its identity, the
// owner's username, spec.limits, what freezes it and whether it is
// terminating (about 150 bytes; the trimmed unstructured object it
// replaced was 1.7 KiB).
type entry struct {
	clusterinformer.Ref
	owner       string
	limits      tenancy.Limits
	freeze      Freeze
	terminating bool
	// deleting: the LogicalCluster has a deletionTimestamp.
	deleting bool
	// ownerShard is the shard holding the cluster's Workspace when that is
	// another shard ("" this one).
	ownerShard string
	// movedTo is the shard a move took the cluster to ("" none).
	movedTo string
}

func trim(obj interface{}) (interface{}, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return &entry{
		Ref:    clusterinformer.RefOf(u),
		owner:  ownerName(u.GetAnnotations()[tenancy.OwnerAnnotation]),
		limits: LimitsOf(u, "spec", "limits"),
		freeze: Freeze{Reason: FrozenOf(u, "spec", "frozen"), Restore: u.GetAnnotations()[tenancy.RestoreAnnotation],
			Move: u.GetAnnotations()[tenancy.MoveAnnotation]},
		terminating: phase == tenancy.PhaseTerminating,
		movedTo:     u.GetAnnotations()[tenancy.MovedToAnnotation],
		deleting:    u.GetDeletionTimestamp() != nil,
		ownerShard:  ownerShard(u),
	}, nil
}

func ownerShard(u *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "spec", "owner", "shard")
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// OwnerShard is the shard that holds the Workspace of a cluster whose
// parent is on another shard ("" when it is this one, or unknown).
func (r *Registry) OwnerShard(c logicalcluster.Name) string {
	if e := r.get(c); e != nil {
		return e.ownerShard
	}
	return ""
}

// ownerName is the username in an owner annotation ("" when unknown).
func ownerName(raw string) string {
	var o struct {
		Username string `json:"username"`
	}
	if raw == "" || json.Unmarshal([]byte(raw), &o) != nil {
		return ""
	}
	// One copy of each username: most installations have few owners
	// of many workspaces.
	return unique.Make(o.Username).Value()
}

// get returns the registry's entry of a cluster (nil when unknown).
func (r *Registry) get(c logicalcluster.Name) *entry {
	ix := r.indexer.Load()
	if ix == nil {
		return nil
	}
	obj, ok, err := (*ix).GetByKey(clusterinformer.Key(c, "", tenancy.LogicalClusterName))
	if err != nil || !ok {
		return nil
	}
	e, _ := obj.(*entry)
	return e
}

// Synced reports whether the registry has loaded every LogicalCluster.
func (r *Registry) Synced() bool { return r.indexer.Load() != nil }

// State reports whether the cluster exists and whether it is being deleted.
func (r *Registry) State(c logicalcluster.Name) (exists, terminating bool) {
	if c == logicalcluster.Root || c == logicalcluster.SystemCRDs {
		return true, false
	}
	e := r.get(c)
	if e == nil {
		return false, false
	}
	return true, e.terminating
}

// Owner returns the username recorded as the owner of a cluster's
// workspace ("" when unknown).
func (r *Registry) Owner(c logicalcluster.Name) string {
	if c == logicalcluster.Root {
		return ""
	}
	if e := r.get(c); e != nil {
		return e.owner
	}
	return ""
}

// Exists reports whether the cluster exists and is not being deleted.
func (r *Registry) Exists(c logicalcluster.Name) bool {
	exists, terminating := r.State(c)
	return exists && !terminating
}

// Names lists the existing clusters (for `ws tree` and tests).
func (r *Registry) Names() []logicalcluster.Name {
	out := []logicalcluster.Name{logicalcluster.Root}
	if ix := r.indexer.Load(); ix != nil {
		for _, k := range (*ix).ListKeys() {
			if c, _, _, err := clusterinformer.SplitKey(k); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// Limits returns the caps its Workspace set on a cluster (spec.limits of
// its LogicalCluster; zero where none is set, and for root).
func (r *Registry) Limits(c logicalcluster.Name) tenancy.Limits {
	if c == logicalcluster.Root {
		return tenancy.Limits{}
	}
	if e := r.get(c); e != nil {
		return e.limits
	}
	return tenancy.Limits{}
}

// LimitsOf reads a Limits object at fields of u (zero where absent).
func LimitsOf(u *unstructured.Unstructured, fields ...string) tenancy.Limits {
	objects, _, _ := unstructured.NestedInt64(u.Object, append(fields, "objects")...)
	bytes, _, _ := unstructured.NestedInt64(u.Object, append(fields, "bytes")...)
	return tenancy.Limits{Objects: objects, Bytes: bytes}
}

// Freeze is what makes a logical cluster read-only (server/frozen): its
// Workspace's spec.frozen, copied to its LogicalCluster, or a restore in
// progress (tenancy.RestoreAnnotation on its LogicalCluster).
type Freeze struct {
	// Reason is spec.frozen.reason ("" when not set).
	Reason string
	// Restore names the WorkspaceRestore, in the parent, that is
	// restoring the cluster ("" when none).
	Restore string
	// Move is the tenancy.MoveAnnotation of a move to another shard in
	// progress ("" when none).
	Move string
}

// Frozen reports whether any of them freezes the cluster.
func (f Freeze) Frozen() bool { return f.Reason != "" || f.Restore != "" || f.Move != "" }

// MovedTo is the shard a move took the cluster to, when this shard's copy
// is the one left behind ("" otherwise).
func (r *Registry) MovedTo(c logicalcluster.Name) string {
	if e := r.get(c); e != nil {
		return e.movedTo
	}
	return ""
}

// FreezeOf returns what freezes a cluster (nothing for root and for
// clusters the registry does not know).
func (r *Registry) FreezeOf(c logicalcluster.Name) Freeze {
	if c == logicalcluster.Root || c == logicalcluster.SystemCRDs {
		return Freeze{}
	}
	if e := r.get(c); e != nil {
		return e.freeze
	}
	return Freeze{}
}

// Frozen reports whether a cluster is read-only, and why: its LogicalCluster
// has spec.frozen (the reason is its reason) or the restore annotation
// (the reason names the restore). A restore's reason comes first: it holds
// the cluster frozen whatever spec.frozen says.
func (r *Registry) Frozen(c logicalcluster.Name) (reason string, frozen bool) {
	f := r.FreezeOf(c)
	if f.Restore != "" {
		return RestoreReason(c, f.Restore), true
	}
	if f.Move != "" {
		return MoveReason(c, f.Move), true
	}
	return f.Reason, f.Reason != ""
}

// RestoreReason is the reason a cluster is frozen by a restore.
func RestoreReason(c logicalcluster.Name, restore string) string {
	parent, _ := c.Parent()
	return fmt.Sprintf("being restored by WorkspaceRestore %s in %s", restore, parent)
}

// MoveReason is the reason a cluster is frozen by a move (move is its
// tenancy.MoveAnnotation).
func MoveReason(c logicalcluster.Name, move string) string {
	parent, _ := c.Parent()
	shard, name := tenancy.ParseMove(move)
	return fmt.Sprintf("it is moving to shard %s (WorkspaceMove %s in %s)", shard, name, parent)
}

// FrozenOf reads the reason of a Frozen object at fields of u ("" where
// absent).
func FrozenOf(u *unstructured.Unstructured, fields ...string) string {
	reason, _, _ := unstructured.NestedString(u.Object, append(fields, "reason")...)
	return reason
}

// StoredReady completes a new LogicalCluster (clusterstore.WithOnCreate)
// with status.phase Ready and status.URL (serverURL/clusters/<cluster>): a
// logical cluster serves requests from the moment its LogicalCluster is
// stored. Its Workspace says whether it is initialized.
func StoredReady(serverURL string) func(runtime.Object) {
	return func(obj runtime.Object) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		if p, _, _ := unstructured.NestedString(u.Object, "status", "phase"); p != "" {
			return
		}
		status := map[string]interface{}{"phase": tenancy.PhaseReady}
		if c := u.GetAnnotations()[logicalcluster.Annotation]; c != "" {
			status["URL"] = serverURL + "/clusters/" + c
		}
		u.Object["status"] = status
	}
}
