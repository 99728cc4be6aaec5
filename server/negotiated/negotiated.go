// Package negotiated tells which negotiated APIs a logical cluster is
// served: those of the location workspaces its Placements use
// (NegotiatedAPIResources, written by the negotiation controller), as
// CustomResourceDefinitions that crdserving serves next to the cluster's
// own. A CRD of the cluster's own with the same name wins. Objects are
// stored in the workspace that creates them, under its cluster, like any
// custom resource.
//
// It is the shape API sharing (issue 18) can reuse: definitions that live
// in one workspace and are served in others.
package negotiated

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const byLocation = "location"

// Index is the shared view of negotiated APIs and of who places where.
type Index struct {
	negotiated cache.Indexer
	placements cache.Indexer
	synced     atomic.Bool

	mu       sync.Mutex
	onChange []func(clusters []logicalcluster.Name)
}

// New returns an Index; Start fills it.
func New() *Index { return &Index{} }

// OnChange registers a function called with the clusters whose served
// negotiated APIs may have changed.
func (x *Index) OnChange(f func(clusters []logicalcluster.Name)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.onChange = append(x.onChange, f)
}

func (x *Index) changed(clusters []logicalcluster.Name) {
	if len(clusters) == 0 {
		return
	}
	x.mu.Lock()
	fs := append([]func([]logicalcluster.Name){}, x.onChange...)
	x.mu.Unlock()
	for _, f := range fs {
		f(clusters)
	}
}

func unwrap(obj interface{}) *unstructured.Unstructured {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

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
	onPlacement := func(objs ...interface{}) {
		var cls []logicalcluster.Name
		for _, o := range objs {
			if u := unwrap(o); u != nil {
				cls = append(cls, clusterinformer.ClusterOf(u))
			}
		}
		x.changed(cls)
	}
	pr := d.Resource(workload.PlacementsResource)
	var pinf, ninf cache.Controller
	x.placements, pinf = clusterinformer.New(clusterinformer.ListWatch(pr.List, pr.Watch), &unstructured.Unstructured{}, pIdx,
		cache.ResourceEventHandlerFuncs{
			AddFunc: func(o interface{}) { onPlacement(o) },
			UpdateFunc: func(old, o interface{}) {
				if location(unwrap(old)) != location(unwrap(o)) || unwrap(o).GetDeletionTimestamp() != nil {
					onPlacement(o)
				}
			},
			DeleteFunc: func(o interface{}) { onPlacement(o) },
		})
	onNegotiated := func(o interface{}) {
		if u := unwrap(o); u != nil {
			x.changed(x.placedOn(clusterinformer.ClusterOf(u)))
		}
	}
	nr := d.Resource(apiresource.NegotiatedResource)
	x.negotiated, ninf = clusterinformer.New(clusterinformer.ListWatch(nr.List, nr.Watch), &unstructured.Unstructured{}, clusterinformer.ClusterIndexers,
		cache.ResourceEventHandlerFuncs{AddFunc: onNegotiated, UpdateFunc: func(old, o interface{}) {
			if fmt.Sprint(unwrap(old).Object["spec"]) != fmt.Sprint(unwrap(o).Object["spec"]) {
				onNegotiated(o)
			}
		}, DeleteFunc: onNegotiated})
	go pinf.RunWithContext(ctx)
	go ninf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), pinf.HasSynced, ninf.HasSynced) {
		return fmt.Errorf("the negotiated API index did not sync")
	}
	x.synced.Store(true)
	return nil
}

// placedOn returns the clusters with a Placement on location.
func (x *Index) placedOn(location logicalcluster.Name) []logicalcluster.Name {
	objs, _ := x.placements.ByIndex(byLocation, string(location))
	return clusterinformer.ClustersOf(objs)
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

// Definitions returns the negotiated definitions served in a cluster, one
// per name (the first location in name order wins).
func (x *Index) Definitions(cluster logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition {
	seen := map[string]bool{}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, loc := range x.locations(cluster) {
		objs, _ := x.negotiated.ByIndex(clusterinformer.ByCluster, string(loc))
		for _, o := range objs {
			crd := definition(loc, o.(*unstructured.Unstructured))
			if crd != nil && !seen[crd.Name] {
				seen[crd.Name] = true
				out = append(out, crd)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Definition returns one negotiated definition served in a cluster.
func (x *Index) Definition(cluster logicalcluster.Name, name string) (*apiextensionsv1.CustomResourceDefinition, bool) {
	for _, loc := range x.locations(cluster) {
		if o, ok, _ := x.negotiated.GetByKey(clusterinformer.Key(loc, "", name)); ok {
			if crd := definition(loc, o.(*unstructured.Unstructured)); crd != nil {
				return crd, true
			}
		}
	}
	return nil, false
}

// AllNamed returns every location's definition of a name (requests across
// all clusters merge them).
func (x *Index) AllNamed(name string) []*apiextensionsv1.CustomResourceDefinition {
	if !x.synced.Load() {
		return nil
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, o := range x.negotiated.List() {
		u := o.(*unstructured.Unstructured)
		if u.GetName() == name {
			if crd := definition(clusterinformer.ClusterOf(u), u); crd != nil {
				out = append(out, crd)
			}
		}
	}
	return out
}

// Names returns the names of every negotiated definition.
func (x *Index) Names() []string {
	if !x.synced.Load() {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, o := range x.negotiated.List() {
		u := o.(*unstructured.Unstructured)
		if builtIn(u) {
			continue
		}
		if n := u.GetName(); !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Resources returns the resources (storage versions) of the negotiated
// definitions served in a cluster: what placement labels and syncers sync.
func (x *Index) Resources(cluster logicalcluster.Name) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, crd := range x.Definitions(cluster) {
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				out = append(out, schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural})
			}
		}
	}
	return out
}

// definition makes a served CRD of a NegotiatedAPIResource: its spec,
// accepted names and Established, a UID that changes with it (so serving
// state is rebuilt), and the location as its cluster.
func definition(loc logicalcluster.Name, u *unstructured.Unstructured) *apiextensionsv1.CustomResourceDefinition {
	if builtIn(u) {
		// Served by upstream's code (server/workloadapis); the negotiated
		// schema restricts what is accepted (BuiltInSchemas).
		return nil
	}
	var n apiresource.NegotiatedAPIResource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil || len(n.Spec.CRD.Versions) == 0 || n.DeletionTimestamp != nil {
		return nil
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%s", loc, n.UID, n.ResourceVersion)
	spec := *n.Spec.CRD.DeepCopy()
	spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: types.UID(fmt.Sprintf("negotiated-%x", h.Sum64())), ResourceVersion: n.ResourceVersion,
			Annotations: map[string]string{logicalcluster.Annotation: string(loc)}, CreationTimestamp: n.CreationTimestamp},
		Spec: spec,
		Status: apiextensionsv1.CustomResourceDefinitionStatus{
			AcceptedNames: spec.Names,
			Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "Negotiated"},
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "Negotiated"},
			},
		},
	}
	for _, v := range spec.Versions {
		if v.Storage {
			crd.Status.StoredVersions = []string{v.Name}
		}
	}
	return crd
}

// builtIn: a NegotiatedAPIResource of a built-in workload kind.
func builtIn(u *unstructured.Unstructured) bool {
	group, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "group")
	plural, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "names", "plural")
	return workload.IsWorkloadResource(schema.GroupResource{Group: group, Resource: plural})
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
