package boundapis

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// replica is the read-only copy of another shard's APIExports,
// APIResourceSchemas and APIBindings: one wildcard watch of each per
// peer shard, made with the peer client (the peer's storage writes every
// object's cluster annotation, so an object's workspace is the peer's
// word, never a tenant's). Exports and schemas resolve this shard's
// bindings of a provider on the peer; bindings tell a provider here
// which workspaces on the peer bind its exports.
type replica struct {
	shard                      string
	schemas, exports, bindings cache.Indexer
	synced                     []cache.InformerSynced
}

func (r *replica) hasSynced() bool {
	for _, s := range r.synced {
		if !s() {
			return false
		}
	}
	return true
}

// StartPeers replicates the APIs of the other shards of the installation
// (peers: shard name -> the peer client configuration). It returns at
// once: a peer that cannot be reached yet is retried by its watches, and
// until its copy has synced, bindings of its exports say so
// (ExportUnavailable) instead of saying the export does not exist. A copy
// that synced keeps serving while its peer is down (its watches retry).
func (x *Index) StartPeers(ctx context.Context, peers map[string]*rest.Config) error {
	names := make([]string, 0, len(peers))
	for n := range peers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*replica
	for _, name := range names {
		d, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(peers[name]))
		if err != nil {
			return fmt.Errorf("shard %s: %v", name, err)
		}
		r := &replica{shard: name}
		var informers []cache.Controller
		watch := func(gvr schema.GroupVersionResource, idx cache.Indexers, h cache.ResourceEventHandler, trim cache.TransformFunc) cache.Indexer {
			res := d.Resource(gvr)
			var indexer cache.Indexer
			var inf cache.Controller
			if trim != nil {
				indexer, inf = clusterinformer.NewTrimmed(clusterinformer.ListWatch(res.List, res.Watch), &unstructured.Unstructured{}, idx, h, trim)
			} else {
				indexer, inf = clusterinformer.New(clusterinformer.ListWatch(res.List, res.Watch), &unstructured.Unstructured{}, idx, h)
			}
			informers = append(informers, inf)
			r.synced = append(r.synced, inf.HasSynced)
			return indexer
		}
		onExport, onSchema := x.exportHandlers(func() cache.Indexer { return r.exports })
		r.schemas = watch(apis.SchemasResource, clusterinformer.ClusterIndexers, x.handlers(onSchema), nil)
		r.exports = watch(apis.ExportsResource, exportIndexers(), x.handlers(onExport), nil)
		// A peer's bindings are kept as far as who binds what: the
		// reference and the workspace.
		r.bindings = watch(apis.BindingsResource, bindingIndexers(), cache.ResourceEventHandlerFuncs{}, trimBinding)
		for _, inf := range informers {
			go inf.RunWithContext(ctx)
		}
		go func() {
			// Bindings resolved before the copy synced said the export
			// was not known yet: resolved again.
			if cache.WaitForCacheSync(ctx.Done(), r.synced...) {
				klog.InfoS("the APIs of another shard are replicated", "shard", r.shard)
				x.mu.Lock()
				x.generation++
				x.mu.Unlock()
				x.Changed(x.bindingClusters()...)
			}
		}()
		out = append(out, r)
		klog.InfoS("replicating the APIs of another shard", "shard", name)
	}
	x.mu.Lock()
	x.peers = out
	x.generation++
	x.mu.Unlock()
	return nil
}

// trimBinding keeps of an APIBinding what tells who binds what.
func trimBinding(o interface{}) (interface{}, error) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return o, nil
	}
	e := exportOf(u)
	t := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	t.SetName(u.GetName())
	t.SetUID(u.GetUID())
	t.SetResourceVersion(u.GetResourceVersion())
	t.SetAnnotations(map[string]string{logicalcluster.Annotation: string(clusterinformer.ClusterOf(u))})
	_ = unstructured.SetNestedField(t.Object, e.Path, "spec", "reference", "export", "path")
	_ = unstructured.SetNestedField(t.Object, e.Name, "spec", "reference", "export", "name")
	return t, nil
}

func (x *Index) peerList() []*replica {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.peers
}

// source is where an export's objects are: this shard's watches or a
// peer's copy.
type source struct {
	shard            string // "" this shard
	exports, schemas cache.Indexer
}

// locate finds the export provider|name: here when provider is a
// workspace of this shard (a peer's copy is then never consulted), else in
// the one peer copy that holds it. found false with an error: a peer copy
// has not synced yet, or two peers claim the workspace.
func (x *Index) locate(provider logicalcluster.Name, name string) (src source, o interface{}, found bool, err error) {
	key := clusterinformer.Key(provider, "", name)
	local := source{exports: x.exports, schemas: x.schemas}
	if o, ok, _ := x.exports.GetByKey(key); ok {
		return local, o, true, nil
	}
	if x.isLocal != nil && x.isLocal(provider) {
		return local, nil, false, nil
	}
	var holders []string
	var unsynced []string
	uids := map[string]bool{}
	for _, r := range x.peerList() {
		if o2, ok, _ := r.exports.GetByKey(key); ok {
			holders = append(holders, r.shard)
			uids[string(o2.(*unstructured.Unstructured).GetUID())] = true
			if !found {
				src, o, found = source{shard: r.shard, exports: r.exports, schemas: r.schemas}, o2, true
			}
		} else if !r.hasSynced() {
			unsynced = append(unsynced, r.shard)
		}
	}
	switch {
	case len(uids) > 1:
		// The same export (one UID) on two shards is a workspace being
		// moved (a move keeps UIDs): either copy serves. Two different
		// exports claiming one workspace is not decided by chance.
		return source{}, nil, false, fmt.Errorf("APIExport %s of workspace %s is reported by several shards (%s); it is bound from none of them until one holds it", name, provider, strings.Join(holders, ", "))
	case found:
		return src, o, true, nil
	case len(unsynced) > 0:
		return source{}, nil, false, &UnavailableError{Shards: unsynced}
	}
	return local, nil, false, nil
}

// UnavailableError: an export may be on a shard whose copy has not synced
// (the shard has not been reached since this one started).
type UnavailableError struct{ Shards []string }

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the APIs of shard(s) %s are not known yet (not reached since this shard started); the export may be there", strings.Join(e.Shards, ", "))
}

// ExportShard returns the shard that holds the APIExport provider|name:
// "" for this shard (or when no shard has it), else the peer's name.
func (x *Index) ExportShard(provider logicalcluster.Name, name string) (string, error) {
	if !x.synced.Load() {
		return "", fmt.Errorf("the API binding index is starting")
	}
	src, _, found, err := x.locate(provider, name)
	if err != nil || !found {
		return "", err
	}
	return src.shard, nil
}

// SetLocal tells the index which workspaces this shard holds: an export
// of one of them is looked up here only, never in a peer's copy.
func (x *Index) SetLocal(f func(logicalcluster.Name) bool) { x.isLocal = f }

// RemoteConsumers returns, per peer shard, the workspaces there with an
// APIBinding of the export name of provider (sorted).
func (x *Index) RemoteConsumers(provider logicalcluster.Name, name string) map[string][]logicalcluster.Name {
	var out map[string][]logicalcluster.Name
	for _, r := range x.peerList() {
		objs, _ := r.bindings.ByIndex(byExport, exportKey(apis.ExportName{Path: string(provider), Name: name}))
		if len(objs) == 0 {
			continue
		}
		cs := clusterinformer.ClustersOf(objs)
		sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
		if out == nil {
			out = map[string][]logicalcluster.Name{}
		}
		out[r.shard] = cs
	}
	return out
}

// PeersSynced reports whether every peer's copy has synced.
func (x *Index) PeersSynced() bool {
	for _, r := range x.peerList() {
		if !r.hasSynced() {
			return false
		}
	}
	return true
}

// bindingClusters returns the clusters of this shard with bindings.
func (x *Index) bindingClusters() []logicalcluster.Name {
	if x.bindings == nil {
		return nil
	}
	var out []logicalcluster.Name
	for _, c := range x.bindings.ListIndexFuncValues(clusterinformer.ByCluster) {
		out = append(out, logicalcluster.Name(c))
	}
	return out
}

// UnsyncedPeers names the peer shards whose copy has not synced yet.
func (x *Index) UnsyncedPeers() []string {
	var out []string
	for _, r := range x.peerList() {
		if !r.hasSynced() {
			out = append(out, r.shard)
		}
	}
	return out
}
