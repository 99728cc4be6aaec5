// Package boundapis tells which shared APIs (apis.kcp.io) each logical
// cluster is served: for every APIBinding, the APIExport it names and that
// export's current APIResourceSchemas, as CustomResourceDefinitions that
// crdserving serves next to the cluster's own. It also answers the export
// view: which definitions an export serves and which clusters bound it.
//
// Nothing runs per binding: three shared watches (schemas, exports,
// bindings across all clusters), on a shard of several three more per
// other shard (a read-only copy of its APIs, peers.go), and a cache of
// resolved bindings per consumer cluster, rebuilt when one of its inputs
// changes.
//
// A binding's export identity is computed here from the export object
// (apis.Identity), never read from a client-written field.
package boundapis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const (
	byExport   = "export"   // bindings by the export they name (path|name)
	byProvider = "provider" // bindings by the export's workspace
	byIdentity = "identity" // exports by identity
)

// Binding is one APIBinding as resolved against its export.
type Binding struct {
	Name    string
	Cluster logicalcluster.Name
	Export  apis.ExportName
	// Identity is the export's identity ("" when the export is missing).
	Identity string
	// Bound is true when the export's resources are served.
	Bound bool
	// Deleting: the binding is being deleted (its objects first).
	Deleting bool
	// Reason and Message explain Bound (a condition's reason and message).
	Reason, Message string
	Resources       []apis.BoundResource
	Definitions     []*apiextensionsv1.CustomResourceDefinition
	ExportClaims    []apis.PermissionClaim
	// Claims are the export's claims the binding accepted.
	Claims  []apis.PermissionClaim
	created metav1.Time
}

// Index is the shared view of exports, schemas and bindings.
type Index struct {
	schemas, exports, bindings cache.Indexer
	synced                     atomic.Bool
	// localCRD reports whether a cluster has a CRD of its own by this name.
	localCRD func(cluster logicalcluster.Name, name string) bool

	mu       sync.Mutex
	resolved map[logicalcluster.Name][]*Binding
	// exportCache holds resolved exports by cache key (cluster|name): an
	// export's schemas are validated once per change, not once per
	// consumer or request.
	exportCache map[string]exportEntry
	// generation counts invalidations: a result computed across one is
	// not cached (it may be from before the change).
	generation uint64
	onChange   []func(clusters []logicalcluster.Name)
	onExport   []func(provider logicalcluster.Name, name string)
	// peers are the copies of the other shards' APIs (peers.go).
	peers []*replica
	// isLocal reports whether a workspace is on this shard (nil: all).
	isLocal func(logicalcluster.Name) bool
}

// New returns an Index; localCRD tells it about a cluster's own CRDs
// (which a binding never shadows). Start fills it.
func New(localCRD func(logicalcluster.Name, string) bool) *Index {
	return &Index{localCRD: localCRD, resolved: map[logicalcluster.Name][]*Binding{}, exportCache: map[string]exportEntry{}}
}

// OnChange registers a function called with the clusters whose bound APIs
// may have changed.
func (x *Index) OnChange(f func(clusters []logicalcluster.Name)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.onChange = append(x.onChange, f)
}

// Changed forgets what was resolved for clusters and tells the listeners
// (also called when a cluster's own CRDs change).
func (x *Index) Changed(clusters ...logicalcluster.Name) {
	if len(clusters) == 0 {
		return
	}
	x.mu.Lock()
	x.generation++
	for _, c := range clusters {
		delete(x.resolved, c)
	}
	fs := append([]func([]logicalcluster.Name){}, x.onChange...)
	x.mu.Unlock()
	for _, f := range fs {
		f(clusters)
	}
}

// OnExportChange registers a function called with each export whose
// object or schemas changed.
func (x *Index) OnExportChange(f func(provider logicalcluster.Name, name string)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.onExport = append(x.onExport, f)
}

func (x *Index) forgetExports(provider logicalcluster.Name, names ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.generation++
	for _, n := range names {
		delete(x.exportCache, clusterinformer.Key(provider, "", n))
	}
}

func (x *Index) exportChanged(provider logicalcluster.Name, names ...string) {
	x.mu.Lock()
	fs := append([]func(logicalcluster.Name, string){}, x.onExport...)
	x.mu.Unlock()
	for _, f := range fs {
		for _, n := range names {
			f(provider, n)
		}
	}
}

func unwrap(obj interface{}) *unstructured.Unstructured {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

func exportOf(u *unstructured.Unstructured) apis.ExportName {
	path, _, _ := unstructured.NestedString(u.Object, "spec", "reference", "export", "path")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "reference", "export", "name")
	return apis.ExportName{Path: path, Name: name}
}

func exportKey(e apis.ExportName) string { return e.Path + "|" + e.Name }

// bindingIndexers index APIBindings by cluster, by the export they name
// and by the export's workspace.
func bindingIndexers() cache.Indexers {
	idx := cache.Indexers{
		byExport: func(o interface{}) ([]string, error) {
			return []string{exportKey(exportOf(o.(*unstructured.Unstructured)))}, nil
		},
		byProvider: func(o interface{}) ([]string, error) {
			return []string{exportOf(o.(*unstructured.Unstructured)).Path}, nil
		},
	}
	maps.Copy(idx, clusterinformer.ClusterIndexers)
	return idx
}

// exportIndexers index APIExports by cluster and by identity.
func exportIndexers() cache.Indexers {
	idx := cache.Indexers{byIdentity: func(o interface{}) ([]string, error) {
		u := o.(*unstructured.Unstructured)
		return []string{apis.Identity(string(clusterinformer.ClusterOf(u)), u.GetName(), u.GetUID())}, nil
	}}
	maps.Copy(idx, clusterinformer.ClusterIndexers)
	return idx
}

// Start runs the three watches and returns once they have synced.
func (x *Index) Start(ctx context.Context, loopback *rest.Config) error {
	d, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	onBinding := func(o interface{}) {
		if u := unwrap(o); u != nil {
			x.Changed(clusterinformer.ClusterOf(u))
		}
	}
	onExport, onSchema := x.exportHandlers(func() cache.Indexer { return x.exports })
	var informers []cache.Controller
	watch := func(gvr schema.GroupVersionResource, idx cache.Indexers, on func(interface{})) cache.Indexer {
		r := d.Resource(gvr)
		indexer, inf := clusterinformer.New(clusterinformer.ListWatch(r.List, r.Watch), &unstructured.Unstructured{}, idx, x.handlers(on))
		informers = append(informers, inf)
		return indexer
	}
	x.schemas = watch(apis.SchemasResource, clusterinformer.ClusterIndexers, onSchema)
	x.exports = watch(apis.ExportsResource, exportIndexers(), onExport)
	x.bindings = watch(apis.BindingsResource, bindingIndexers(), onBinding)
	var synced []cache.InformerSynced
	for _, inf := range informers {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !clusterinformer.WaitForSync(ctx, synced...) {
		return fmt.Errorf("the API binding index did not sync")
	}
	x.synced.Store(true)
	return nil
}

// exportHandlers are the reactions to a change of an export or a schema
// held by exports() (this shard's or a peer's copy): what was resolved
// from them is forgotten, for this shard's consumers and views.
func (x *Index) exportHandlers(exports func() cache.Indexer) (onExport, onSchema func(interface{})) {
	onExport = func(o interface{}) {
		if u := unwrap(o); u != nil {
			x.forgetExports(clusterinformer.ClusterOf(u), u.GetName())
			x.Changed(x.consumers(exportKey(apis.ExportName{Path: string(clusterinformer.ClusterOf(u)), Name: u.GetName()}), byExport)...)
			x.exportChanged(clusterinformer.ClusterOf(u), u.GetName())
		}
	}
	onSchema = func(o interface{}) {
		if u := unwrap(o); u != nil {
			provider := clusterinformer.ClusterOf(u)
			var names []string
			if idx := exports(); idx != nil {
				objs, _ := idx.ByIndex(clusterinformer.ByCluster, string(provider))
				for _, e := range objs {
					names = append(names, e.(*unstructured.Unstructured).GetName())
				}
			}
			x.forgetExports(provider, names...)
			x.Changed(x.consumers(string(provider), byProvider)...)
			x.exportChanged(provider, names...)
		}
	}
	return onExport, onSchema
}

// handlers calls on when an object comes, goes, or changes its spec, UID
// or deletion.
func (x *Index) handlers(on func(interface{})) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: on, DeleteFunc: on, UpdateFunc: func(old, o interface{}) {
		a, b := unwrap(old), unwrap(o)
		if a == nil || b == nil || fmt.Sprint(a.Object["spec"]) != fmt.Sprint(b.Object["spec"]) || a.GetUID() != b.GetUID() ||
			(a.GetDeletionTimestamp() == nil) != (b.GetDeletionTimestamp() == nil) {
			on(o)
		}
	}}
}

// consumers returns the clusters of this shard's bindings with this index
// value.
func (x *Index) consumers(value, index string) []logicalcluster.Name {
	if x.bindings == nil {
		return nil
	}
	objs, _ := x.bindings.ByIndex(index, value)
	return clusterinformer.ClustersOf(objs)
}

// Bindings returns the cluster's APIBindings, resolved, oldest first.
func (x *Index) Bindings(cluster logicalcluster.Name) []*Binding {
	if !x.synced.Load() || cluster.IsWildcard() {
		return nil
	}
	x.mu.Lock()
	out, ok := x.resolved[cluster]
	gen := x.generation
	x.mu.Unlock()
	if ok {
		return out
	}
	objs, _ := x.bindings.ByIndex(clusterinformer.ByCluster, string(cluster))
	if len(objs) == 0 {
		return nil // nothing cached for the (many) clusters without bindings
	}
	out = x.resolve(cluster, objs)
	x.mu.Lock()
	if x.generation == gen {
		x.resolved[cluster] = out
	}
	x.mu.Unlock()
	return out
}

// resolve decides what each binding of a cluster serves. The oldest
// binding of a resource wins; a resource the cluster already has a CRD of,
// or that an older binding serves, makes the binding not bound.
func (x *Index) resolve(cluster logicalcluster.Name, objs []interface{}) []*Binding {
	var out []*Binding
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		var b apis.APIBinding
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b) != nil {
			continue
		}
		out = append(out, &Binding{Name: b.Name, Cluster: cluster, Export: b.Spec.Reference.Export, created: b.CreationTimestamp})
		r := out[len(out)-1]
		// A binding being deleted stays served until its finalizer has
		// deleted the objects of its resources (through this very API).
		x.resolveOne(r, &b)
		if b.DeletionTimestamp != nil {
			r.Deleting = true
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].created.Equal(&out[j].created) {
			return out[i].created.Before(&out[j].created)
		}
		return out[i].Name < out[j].Name
	})
	taken := map[string]string{}
	for _, r := range out {
		if !r.Bound {
			continue
		}
		for _, crd := range r.Definitions {
			if other, ok := taken[crd.Name]; ok {
				r.Bound, r.Reason, r.Message = false, "NameConflict", fmt.Sprintf("%s is already served by APIBinding %s", crd.Name, other)
			} else if x.localCRD != nil && x.localCRD(cluster, crd.Name) {
				r.Bound, r.Reason, r.Message = false, "NameConflict", fmt.Sprintf("this workspace has a CustomResourceDefinition %s of its own; delete it or this binding", crd.Name)
			}
		}
		if r.Bound {
			for _, crd := range r.Definitions {
				taken[crd.Name] = r.Name
			}
		} else {
			r.Definitions, r.Resources = nil, nil
		}
	}
	return out
}

// resolveOne fills r from the export b names.
func (x *Index) resolveOne(r *Binding, b *apis.APIBinding) {
	ref := b.Spec.Reference.Export
	provider, err := logicalcluster.Parse(ref.Path)
	if err != nil || provider.IsWildcard() {
		r.Reason, r.Message = "InvalidReference", fmt.Sprintf("%q is not a workspace path", ref.Path)
		return
	}
	e, err := x.Export(provider, ref.Name)
	var unavailable *UnavailableError
	switch {
	case e == nil && errors.As(err, &unavailable):
		r.Reason, r.Message = "ExportUnavailable", err.Error()
		return
	case e == nil && err == nil:
		r.Reason, r.Message = "ExportNotFound", fmt.Sprintf("APIExport %s not found in workspace %s", ref.Name, ref.Path)
		return
	case e == nil:
		r.Reason, r.Message = "InvalidSchema", err.Error()
		return
	}
	r.Identity = e.Identity
	r.ExportClaims = e.Claims
	for _, c := range e.Claims {
		for _, a := range b.Spec.PermissionClaims {
			if a.State == apis.ClaimAccepted && a.Group == c.Group && a.Resource == c.Resource && sameVerbs(a.Verbs, c.Verbs) && SameSelector(a.LabelSelector, c.LabelSelector) {
				r.Claims = append(r.Claims, c)
			}
		}
	}
	if err != nil {
		r.Reason, r.Message = "InvalidSchema", err.Error()
		return
	}
	for _, def := range e.Definitions {
		r.Definitions = append(r.Definitions, consumerDefinition(def, r.Cluster, b.Name))
	}
	r.Resources = e.Resources
	r.Bound, r.Reason, r.Message = true, "Bound", fmt.Sprintf("%d resource(s) of APIExport %s:%s served", len(r.Definitions), ref.Path, ref.Name)
}

// consumerDefinition is an export's definition as a consumer is served
// it: its own metadata (the consumer's cluster and binding in the
// annotations) over the export's spec and status, which are shared, not
// copied: a binding holds no copy of the schema. Definitions are
// read-only once made (whoever changes one copies it first, as
// crdserving's servable does), like objects from an informer's cache.
func consumerDefinition(def *apiextensionsv1.CustomResourceDefinition, cluster logicalcluster.Name, binding string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{TypeMeta: def.TypeMeta, ObjectMeta: *def.ObjectMeta.DeepCopy(), Spec: def.Spec, Status: def.Status}
	if crd.Annotations == nil {
		crd.Annotations = map[string]string{}
	}
	crd.Annotations[logicalcluster.Annotation] = string(cluster)
	crd.Annotations[apis.BindingAnnotation] = binding
	return crd
}

// SameSelector compares two claim selectors by meaning (nil and empty
// both select everything); an invalid one equals nothing.
func SameSelector(a, b *metav1.LabelSelector) bool {
	sa, errA := ClaimSelector(a)
	sb, errB := ClaimSelector(b)
	return errA == nil && errB == nil && sa.String() == sb.String()
}

// ClaimSelector is the selector of a claim: nil selects everything.
func ClaimSelector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}

func sameVerbs(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return strings.Join(a, ",") == strings.Join(b, ",")
}

// definitions makes the served definitions of an export's schemas.
func (x *Index) definitions(schemas cache.Indexer, provider logicalcluster.Name, e *apis.APIExport, identity string) ([]*apiextensionsv1.CustomResourceDefinition, []apis.BoundResource, error) {
	var defs []*apiextensionsv1.CustomResourceDefinition
	var resources []apis.BoundResource
	seen := map[string]bool{}
	for _, name := range e.Spec.LatestResourceSchemas {
		o, ok, _ := schemas.GetByKey(clusterinformer.Key(provider, "", name))
		if !ok {
			return nil, nil, fmt.Errorf("APIResourceSchema %s not found in workspace %s", name, provider)
		}
		var s apis.APIResourceSchema
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.(*unstructured.Unstructured).Object, &s); err != nil {
			return nil, nil, fmt.Errorf("APIResourceSchema %s: %v", name, err)
		}
		crd, err := Definition(&s, identity)
		if err != nil {
			return nil, nil, err
		}
		if seen[crd.Name] {
			return nil, nil, fmt.Errorf("APIExport %s names two schemas of %s", e.Name, crd.Name)
		}
		seen[crd.Name] = true
		defs = append(defs, crd)
		resources = append(resources, apis.BoundResource{Group: s.Spec.Group, Resource: s.Spec.Names.Plural, Schema: s.Name, StorageVersion: crd.Status.StoredVersions[0]})
	}
	return defs, resources, nil
}

// Definition turns a schema into the established CRD it is served as,
// validated like a CRD a user creates. Its UID changes with the schema and
// the identity, so serving state is rebuilt when either does.
func Definition(s *apis.APIResourceSchema, identity string) (*apiextensionsv1.CustomResourceDefinition, error) {
	names := s.Spec.Names
	if names.Singular == "" {
		names.Singular = strings.ToLower(names.Kind)
	}
	if names.ListKind == "" {
		names.ListKind = names.Kind + "List"
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%s", identity, s.UID, s.ResourceVersion)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name: names.Plural + "." + s.Spec.Group, UID: types.UID(fmt.Sprintf("bound-%x", h.Sum64())), ResourceVersion: s.ResourceVersion,
			Generation: 1, CreationTimestamp: s.CreationTimestamp,
			Annotations: map[string]string{apis.IdentityAnnotation: identity},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: s.Spec.Group, Names: names, Scope: s.Spec.Scope, Versions: s.Spec.Versions,
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{
			AcceptedNames: names,
			Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "Bound"},
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "Bound"},
			},
		},
	}
	for _, v := range s.Spec.Versions {
		if v.Storage {
			crd.Status.StoredVersions = []string{v.Name}
		}
	}
	if err := validate(crd); err != nil {
		return nil, fmt.Errorf("APIResourceSchema %s is not a valid definition: %v", s.Name, err)
	}
	return crd, nil
}

// validate checks a definition as the CRD API would on create.
func validate(crd *apiextensionsv1.CustomResourceDefinition) error {
	var internal apiextensionsinternal.CustomResourceDefinition
	v := crd.DeepCopy()
	v.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v)
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v, &internal, nil); err != nil {
		return err
	}
	if errs := validation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
		return errs.ToAggregate()
	}
	if len(crd.Status.StoredVersions) != 1 {
		return fmt.Errorf("exactly one version must be the storage version")
	}
	return nil
}

// Definitions returns the definitions a cluster is served through its
// bound bindings (crdserving.Extra).
func (x *Index) Definitions(cluster logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, b := range x.Bindings(cluster) {
		if b.Bound {
			out = append(out, b.Definitions...)
		}
	}
	return out
}

// Definition returns one definition a cluster is served through a binding.
func (x *Index) Definition(cluster logicalcluster.Name, name string) (*apiextensionsv1.CustomResourceDefinition, bool) {
	for _, b := range x.Bindings(cluster) {
		if !b.Bound {
			continue
		}
		for _, crd := range b.Definitions {
			if crd.Name == name {
				return crd, true
			}
		}
	}
	return nil, false
}

// Export is an APIExport with its current definitions.
type Export struct {
	Name string
	// Shard is the peer shard that holds the export ("" this one).
	Shard       string
	Identity    string
	Definitions []*apiextensionsv1.CustomResourceDefinition
	Resources   []apis.BoundResource
	Claims      []apis.PermissionClaim
}

type exportEntry struct {
	export *Export
	err    error
}

// Export returns an export with its current definitions: nil, nil when it
// does not exist; the export and an error when a schema is missing or
// invalid (Definitions empty then).
func (x *Index) Export(provider logicalcluster.Name, name string) (*Export, error) {
	if !x.synced.Load() {
		return nil, fmt.Errorf("the API binding index is starting")
	}
	key := clusterinformer.Key(provider, "", name)
	x.mu.Lock()
	entry, ok := x.exportCache[key]
	gen := x.generation
	x.mu.Unlock()
	if ok {
		return entry.export, entry.err
	}
	src, o, ok, err := x.locate(provider, name)
	if !ok {
		return nil, err
	}
	var e apis.APIExport
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.(*unstructured.Unstructured).Object, &e); err != nil {
		return nil, err
	}
	if e.DeletionTimestamp != nil {
		return nil, nil
	}
	out := &Export{Name: e.Name, Shard: src.shard, Identity: apis.Identity(string(provider), e.Name, e.UID), Claims: e.Spec.PermissionClaims}
	defs, resources, err := x.definitions(src.schemas, provider, &e, out.Identity)
	if err == nil {
		for _, crd := range defs {
			crd.Annotations[logicalcluster.Annotation] = string(provider)
		}
		out.Definitions, out.Resources = defs, resources
	}
	x.mu.Lock()
	if x.generation == gen {
		x.exportCache[key] = exportEntry{export: out, err: err}
	}
	x.mu.Unlock()
	return out, err
}

// ExportDefinitions returns the definitions of the export with this
// identity (what its view serves across all consumers).
func (x *Index) ExportDefinitions(identity string) []*apiextensionsv1.CustomResourceDefinition {
	if !x.synced.Load() {
		return nil
	}
	objs, _ := x.exports.ByIndex(byIdentity, identity)
	if len(objs) == 0 {
		// An export of another shard that bindings here resolve to.
		for _, r := range x.peerList() {
			more, _ := r.exports.ByIndex(byIdentity, identity)
			objs = append(objs, more...)
		}
	}
	if len(objs) != 1 {
		return nil
	}
	u := objs[0].(*unstructured.Unstructured)
	e, err := x.Export(clusterinformer.ClusterOf(u), u.GetName())
	if err != nil || e == nil || e.Identity != identity {
		return nil
	}
	return e.Definitions
}

// BindingTo returns the cluster's bound binding of the export with this
// identity.
func (x *Index) BindingTo(cluster logicalcluster.Name, identity string) (*Binding, bool) {
	for _, b := range x.Bindings(cluster) {
		if b.Bound && b.Identity == identity {
			return b, true
		}
	}
	return nil, false
}

// Bound returns the binding name and export of a definition a cluster is
// served through a binding (ok false for its own CRDs).
func (x *Index) Bound(cluster logicalcluster.Name, name string) (binding string, export apis.ExportName, ok bool) {
	for _, b := range x.Bindings(cluster) {
		for _, crd := range b.Definitions {
			if b.Bound && crd.Name == name {
				return b.Name, b.Export, true
			}
		}
	}
	return "", apis.ExportName{}, false
}

// Consumers returns the workspaces with an APIBinding (bound or not) of
// the export name of provider.
func (x *Index) Consumers(provider logicalcluster.Name, name string) []logicalcluster.Name {
	out := x.consumers(exportKey(apis.ExportName{Path: string(provider), Name: name}), byExport)
	for _, cs := range x.RemoteConsumers(provider, name) {
		out = append(out, cs...)
	}
	return out
}

// ConsumersOutside returns, for each APIExport of the workspace tree under
// root (root and every workspace below it), the workspaces outside that
// tree with an APIBinding (bound or not) of it, sorted. Deleting the tree
// would leave those consumers' bound objects stored but unreachable.
func (x *Index) ConsumersOutside(root logicalcluster.Name) map[apis.ExportName][]logicalcluster.Name {
	if x.exports == nil {
		return nil
	}
	var out map[apis.ExportName][]logicalcluster.Name
	for _, provider := range x.exports.ListIndexFuncValues(clusterinformer.ByCluster) {
		if !logicalcluster.Name(provider).Within(root) {
			continue
		}
		objs, _ := x.exports.ByIndex(clusterinformer.ByCluster, provider)
		for _, o := range objs {
			export := apis.ExportName{Path: provider, Name: o.(*unstructured.Unstructured).GetName()}
			consumers := slices.DeleteFunc(x.Consumers(logicalcluster.Name(export.Path), export.Name), func(c logicalcluster.Name) bool { return c.Within(root) })
			if len(consumers) == 0 {
				continue
			}
			slices.Sort(consumers)
			if out == nil {
				out = map[apis.ExportName][]logicalcluster.Name{}
			}
			out[export] = consumers
		}
	}
	return out
}

// HoldsExports reports whether a workspace of the tree under root (root
// and every workspace below it) on this shard holds an APIExport.
func (x *Index) HoldsExports(root logicalcluster.Name) bool {
	if x.exports == nil {
		return false
	}
	for _, provider := range x.exports.ListIndexFuncValues(clusterinformer.ByCluster) {
		if !logicalcluster.Name(provider).Within(root) {
			continue
		}
		if objs, _ := x.exports.ByIndex(clusterinformer.ByCluster, provider); len(objs) > 0 {
			return true
		}
	}
	return false
}

// ExportsUsing returns the names of provider's APIExports that list the
// schema in spec.latestResourceSchemas.
func (x *Index) ExportsUsing(provider logicalcluster.Name, schema string) []string {
	if x.exports == nil {
		return nil
	}
	objs, _ := x.exports.ByIndex(clusterinformer.ByCluster, string(provider))
	var names []string
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		latest, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "latestResourceSchemas")
		if slices.Contains(latest, schema) {
			names = append(names, u.GetName())
		}
	}
	sort.Strings(names)
	return names
}

// Keys returns the cache keys (cluster|name) of every binding and export.
func (x *Index) Keys() (bindings, exports []string) {
	if !x.synced.Load() {
		return nil, nil
	}
	return x.bindings.ListKeys(), x.exports.ListKeys()
}

// Object returns the cached APIBinding (binding true) or APIExport.
func (x *Index) Object(binding bool, cluster logicalcluster.Name, name string) (*unstructured.Unstructured, bool) {
	idx := x.exports
	if binding {
		idx = x.bindings
	}
	if idx == nil {
		return nil, false
	}
	o, ok, _ := idx.GetByKey(clusterinformer.Key(cluster, "", name))
	if !ok {
		return nil, false
	}
	return o.(*unstructured.Unstructured), true
}

// CRDHandler returns the handler crdserving calls when a cluster's own
// CRDs change: a CRD created or deleted may decide a binding's conflict.
// Clusters without bindings cost one index lookup.
func (x *Index) CRDHandler() cache.ResourceEventHandler {
	on := func(obj interface{}) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || x.bindings == nil {
			return
		}
		cluster := clusterinformer.ClusterOf(crd)
		if objs, _ := x.bindings.ByIndex(clusterinformer.ByCluster, string(cluster)); len(objs) == 0 {
			return
		}
		before := fingerprint(x.Bindings(cluster))
		x.mu.Lock()
		x.generation++
		delete(x.resolved, cluster)
		x.mu.Unlock()
		if fingerprint(x.Bindings(cluster)) != before {
			x.Changed(cluster)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o interface{}) { on(o) }, DeleteFunc: on}
}

func fingerprint(bs []*Binding) string {
	var b strings.Builder
	for _, r := range bs {
		fmt.Fprintf(&b, "%s/%v/%s;", r.Name, r.Bound, r.Reason)
	}
	return b.String()
}
