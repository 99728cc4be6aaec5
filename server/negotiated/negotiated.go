// Package negotiated tells what negotiation means for a logical cluster,
// from the location workspaces its Placements use: the negotiated
// resources it is served (through its APIBindings to those locations'
// "kubernetes" exports, see server/controllers/negotiation; it serves no
// definitions of its own) and the schemas negotiated for the built-in
// workload kinds, which restrict what placement admission accepts.
package negotiated

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const byLocation = "location"

// Index is the shared view of NegotiatedAPIResources and of who places
// where.
type Index struct {
	negotiated cache.Indexer
	placements cache.Indexer
	bound      *boundapis.Index
	synced     atomic.Bool
}

// New returns an Index that finds bindings in bound; Start fills it.
func New(bound *boundapis.Index) *Index { return &Index{bound: bound} }

func location(u *unstructured.Unstructured) string {
	l, _, _ := unstructured.NestedString(u.Object, "spec", "locationWorkspace")
	return l
}

// Start runs the watches of NegotiatedAPIResources and Placements in all
// clusters and returns once they have synced.
func (x *Index) Start(ctx context.Context, loopback *rest.Config) error {
	d, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	pIdx := cache.Indexers{byLocation: func(obj interface{}) ([]string, error) {
		return []string{location(obj.(*unstructured.Unstructured))}, nil
	}}
	for k, v := range clusterinformer.ClusterIndexers {
		pIdx[k] = v
	}
	pr := d.Resource(workload.PlacementsResource)
	var pinf, ninf cache.Controller
	x.placements, pinf = clusterinformer.New(clusterinformer.ListWatch(pr.List, pr.Watch), &unstructured.Unstructured{}, pIdx, cache.ResourceEventHandlerFuncs{})
	nr := d.Resource(apiresource.NegotiatedResource)
	x.negotiated, ninf = clusterinformer.New(clusterinformer.ListWatch(nr.List, nr.Watch), &unstructured.Unstructured{}, clusterinformer.ClusterIndexers, cache.ResourceEventHandlerFuncs{})
	go pinf.RunWithContext(ctx)
	go ninf.RunWithContext(ctx)
	if !clusterinformer.WaitForSync(ctx, pinf.HasSynced, ninf.HasSynced) {
		return fmt.Errorf("the negotiated API index did not sync")
	}
	x.synced.Store(true)
	return nil
}

// locations returns, in name order, the location workspaces the cluster's
// Placements use.
func (x *Index) locations(cluster logicalcluster.Name) []logicalcluster.Name {
	if !x.synced.Load() {
		return nil
	}
	objs, _ := x.placements.ByIndex(clusterinformer.ByCluster, string(cluster))
	seen := map[string]bool{}
	var out []logicalcluster.Name
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		l := location(u)
		if l == "" || seen[l] || u.GetDeletionTimestamp() != nil {
			continue
		}
		if name, err := logicalcluster.Parse(l); err == nil {
			seen[l] = true
			out = append(out, name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Resources returns the resources (storage versions) served in a cluster
// through its bound bindings to the "kubernetes" export of a location its
// Placements use: what placement labels and syncers sync.
func (x *Index) Resources(cluster logicalcluster.Name) []schema.GroupVersionResource {
	locs := x.locations(cluster)
	if len(locs) == 0 || x.bound == nil {
		return nil
	}
	var out []schema.GroupVersionResource
	for _, b := range x.bound.Bindings(cluster) {
		if !b.Bound || b.Deleting || b.Export.Name != apiresource.ExportName || !slices.Contains(locs, logicalcluster.Name(b.Export.Path)) {
			continue
		}
		for _, r := range b.Resources {
			out = append(out, schema.GroupVersionResource{Group: r.Group, Version: r.StorageVersion, Resource: r.Resource})
		}
	}
	return out
}

// HasBinding reports whether the cluster has an APIBinding by this name
// (bound or not).
func (x *Index) HasBinding(cluster logicalcluster.Name, name string) bool {
	if x.bound == nil {
		return false
	}
	_, ok := x.bound.Object(true, cluster, name)
	return ok
}

// Offered returns the resources the exports of the locations a cluster's
// Placements use offer, served there or not (a CRD of the cluster's own
// shadows them).
func (x *Index) Offered(cluster logicalcluster.Name) []schema.GroupVersionResource {
	if x.bound == nil {
		return nil
	}
	var out []schema.GroupVersionResource
	for _, loc := range x.locations(cluster) {
		e, _ := x.bound.Export(loc, apiresource.ExportName)
		if e == nil {
			continue
		}
		for _, r := range e.Resources {
			out = append(out, schema.GroupVersionResource{Group: r.Group, Version: r.StorageVersion, Resource: r.Resource})
		}
	}
	return out
}

// LocationSchema is the negotiated schema of a built-in resource in one
// location workspace.
type LocationSchema struct {
	Location logicalcluster.Name
	Version  string
	Schema   *apiextensionsv1.JSONSchemaProps
	// Dropped is what some physical cluster there lacks.
	Dropped []string
}

// BuiltInSchemas returns, for each location workspace the cluster's
// Placements use, the schema negotiated there for a built-in workload
// resource (none where no syncer reported it yet).
func (x *Index) BuiltInSchemas(cluster logicalcluster.Name, gr schema.GroupResource) []LocationSchema {
	var out []LocationSchema
	for _, loc := range x.locations(cluster) {
		o, ok, _ := x.negotiated.GetByKey(clusterinformer.Key(loc, "", apiresource.NegotiatedName(gr)))
		if !ok {
			continue
		}
		var n apiresource.NegotiatedAPIResource
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.(*unstructured.Unstructured).Object, &n); err != nil || n.DeletionTimestamp != nil {
			continue
		}
		for _, v := range n.Spec.CRD.Versions {
			if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				out = append(out, LocationSchema{Location: loc, Version: v.Name, Schema: v.Schema.OpenAPIV3Schema, Dropped: n.Status.Dropped})
			}
		}
	}
	return out
}
