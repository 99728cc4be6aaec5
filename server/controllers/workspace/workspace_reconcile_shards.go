package workspace

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// ShardDataFinalizer holds the LogicalCluster of a workspace whose parent
// is on another shard until the shard holding the cluster has deleted its
// data: the parent's shard deletes the LogicalCluster, the holding shard
// sees it being deleted and deletes every object of the cluster
// (shardchildren.go).
const ShardDataFinalizer = "tenancy.kcp.io/shard-data"

// remoteRetry is how soon a workspace waiting for another shard is looked
// at again.
const remoteRetry = 2 * time.Second

// peers are the API clients of the other shards, one per shard.
type peers struct {
	m  *shards.Membership
	mu sync.Mutex
	by map[string]*clusterinformer.Clients
}

func (p *peers) clients(shard string, c logicalcluster.Name) (*clients, error) {
	p.mu.Lock()
	cs, ok := p.by[shard]
	if !ok {
		cfg, err := p.m.Peer(shard)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		if cs, err = clusterinformer.NewClients(cfg); err != nil {
			p.mu.Unlock()
			return nil, err
		}
		if p.by == nil {
			p.by = map[string]*clusterinformer.Clients{}
		}
		p.by[shard] = cs
	}
	p.mu.Unlock()
	return clientsOf(cs, c)
}

// shardOf is the shard a Workspace names ("" none: this one).
func shardOf(ws *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(ws.Object, "spec", "shard")
	return s
}

// remote reports whether the Workspace's cluster lives on another shard.
func (r *reconciler) remote(shard string) bool { return r.peers != nil && r.peers.m.Remote(shard) }

// bootstrapRemote creates the child cluster of a Workspace on the shard it
// names, through that shard's API as a peer: the LogicalCluster (owned by
// this shard, held by ShardDataFinalizer), the default namespaces, the
// owner's binding unless the shard serves it, and the type's bindings.
func (r *reconciler) bootstrapRemote(ctx context.Context, parent, child logicalcluster.Name, ws *unstructured.Unstructured, shard string) (time.Duration, error) {
	if phase, _, _ := unstructured.NestedString(ws.Object, "status", "phase"); phase == tenancy.PhaseReady {
		return 0, r.syncSpecRemote(ctx, child, copiedOf(ws), shard)
	}
	waiting := func(what string, err error) (time.Duration, error) {
		msg := fmt.Sprintf("%s on shard %s: %v", what, shard, err)
		if c, _ := readyCondition(ws); c != msg {
			if err := r.setStatus(ctx, parent, ws, tenancy.PhaseInitializing, "", msg); err != nil {
				return 0, err
			}
		}
		return remoteRetry, nil
	}
	cc, err := r.peers.clients(shard, child)
	if err != nil {
		return waiting("reaching the logical cluster", err)
	}
	lcs := cc.dynamic.Resource(tenancy.LogicalClustersResource)
	lc := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": tenancy.Group + "/" + tenancy.Version,
		"kind":       "LogicalCluster",
		"metadata": map[string]interface{}{"name": tenancy.LogicalClusterName, "annotations": ownerAnnotation(ws),
			"finalizers": []interface{}{ShardDataFinalizer}},
		"spec": map[string]interface{}{
			"owner": map[string]interface{}{"cluster": string(parent), "name": ws.GetName(), "uid": string(ws.GetUID()), "shard": r.peers.m.Self},
		},
	}}
	copiedOf(ws).set(lc)
	created, err := lcs.Create(ctx, lc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = lcs.Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
	}
	if err != nil {
		return waiting("creating the logical cluster", err)
	}
	if uid, _, _ := unstructured.NestedString(created.Object, "spec", "owner", "uid"); uid != string(ws.GetUID()) {
		return waiting("creating the logical cluster", fmt.Errorf("logical cluster %s still belongs to an earlier workspace of this name (UID %s) that is being deleted", child, uid))
	}
	for _, ns := range DefaultNamespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := cc.core.Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return waiting("creating namespace "+ns, err)
		}
	}
	if owner, ok := ownerOf(ws); ok && !r.ownerBindingServed {
		if err := r.grantOwner(ctx, cc, owner); err != nil {
			return waiting("granting the owner", err)
		}
	}
	if msg, err := r.bindDefaults(ctx, func() (*clients, error) { return cc, nil }, ws); err != nil || msg != "" {
		if err != nil {
			return waiting("binding the type's APIs", err)
		}
		if c, _ := readyCondition(ws); c != msg {
			if err := r.setStatus(ctx, parent, ws, tenancy.PhaseInitializing, "", msg); err != nil {
				return 0, err
			}
		}
		return bindRetry, nil
	}
	if err := r.setStatus(ctx, parent, ws, tenancy.PhaseReady, r.serverURL+"/clusters/"+string(child), ""); err != nil {
		return 0, err
	}
	return 0, nil
}

// readyCondition is the message of a Workspace's Ready condition.
func readyCondition(ws *unstructured.Unstructured) (string, bool) {
	conds, _, _ := unstructured.NestedSlice(ws.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == "Ready" {
			msg, _ := m["message"].(string)
			return msg, true
		}
	}
	return "", false
}

// syncSpecRemote copies spec.limits and spec.frozen to a LogicalCluster on
// another shard when they differ.
func (r *reconciler) syncSpecRemote(ctx context.Context, child logicalcluster.Name, want copied, shard string) error {
	cc, err := r.peers.clients(shard, child)
	if err != nil {
		return err
	}
	return copyToLogicalCluster(ctx, cc, want)
}

// deleteRemote deletes a workspace whose cluster is on another shard: it
// closes the cluster, deletes its child workspaces, then deletes the
// LogicalCluster, whose shard deletes every object of the cluster before
// it lets the LogicalCluster go; then the finalizer is removed.
func (r *reconciler) deleteRemote(ctx context.Context, parent, child logicalcluster.Name, ws *unstructured.Unstructured, shard string) (time.Duration, error) {
	if !slices.Contains(ws.GetFinalizers(), tenancy.WorkspaceFinalizer) {
		return 0, nil
	}
	if phase, _, _ := unstructured.NestedString(ws.Object, "status", "phase"); phase != tenancy.PhaseTerminating {
		if err := r.setStatus(ctx, parent, ws, tenancy.PhaseTerminating, "", "deleting the logical cluster on shard "+shard); err != nil {
			return 0, err
		}
	}
	cc, err := r.peers.clients(shard, child)
	if err != nil {
		return 0, err
	}
	if err := markTerminating(ctx, cc); err != nil {
		return 0, fmt.Errorf("closing logical cluster %s on shard %s: %w", child, shard, err)
	}
	if again, err := deleteChildren(ctx, cc); again != 0 || err != nil {
		return again, err
	}
	lcs := cc.dynamic.Resource(tenancy.LogicalClustersResource)
	lc, err := lcs.Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Gone with its data.
	case err != nil:
		return 0, fmt.Errorf("reading logical cluster %s on shard %s: %w", child, shard, err)
	default:
		if uid, _, _ := unstructured.NestedString(lc.Object, "spec", "owner", "uid"); uid != string(ws.GetUID()) {
			break // another incarnation's: not this Workspace's to delete
		}
		if lc.GetDeletionTimestamp() == nil {
			if err := lcs.Delete(ctx, tenancy.LogicalClusterName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return 0, fmt.Errorf("deleting logical cluster %s on shard %s: %w", child, shard, err)
			}
		}
		return remoteRetry / 4, nil
	}
	klog.InfoS("deleted logical cluster on another shard", "cluster", child, "shard", shard)
	return r.removeFinalizer(ctx, parent, ws)
}

// removeFinalizer lets a deleted Workspace go.
func (r *reconciler) removeFinalizer(ctx context.Context, parent logicalcluster.Name, ws *unstructured.Unstructured) (time.Duration, error) {
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

// ownedElsewhere reports whether a LogicalCluster belongs to a Workspace
// on another shard: that shard creates and deletes it, and this one only
// deletes its data when asked (its orphan sweep leaves it alone: the
// parent is not here to ask).
func ownedElsewhere(lc *unstructured.Unstructured, self string) bool {
	s, _, _ := unstructured.NestedString(lc.Object, "spec", "owner", "shard")
	return s != "" && s != self
}
