package workloadapis

import (
	"context"
	"reflect"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"

	"github.com/kcpsql/kcp/schema/workload"
	placementadmission "github.com/kcpsql/kcp/server/admission/placement"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// A workload object created in a namespace that no Placement selects is
// stored and waits, as a Pod waits on a cluster without nodes. Its status
// gets the condition below (for kinds whose status has conditions) and the
// client a warning; the status the syncer copies up once a Placement
// selects the namespace replaces it.
const (
	PlacedCondition   = "Placed"
	NoPlacementReason = "NoPlacement"
)

// unplacedAware is the create strategy of a workload resource: upstream's,
// plus the condition and the warning of an object no Placement runs.
type unplacedAware struct {
	rest.RESTCreateStrategy
	resource string
	// placed reports whether the namespace of a new object is placed
	// (placementadmission.Unplaced in the server; a stub in unit tests).
	unplaced func(ctx context.Context, cluster logicalcluster.Name, namespace string) bool
}

func (s unplacedAware) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.RESTCreateStrategy.PrepareForCreate(ctx, obj)
	cluster, ok := logicalcluster.From(ctx)
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	if !ok || cluster.IsWildcard() || ns == "" || !s.unplaced(ctx, cluster, ns) {
		return
	}
	setCondition(obj, PlacedCondition, NoPlacementReason, placementadmission.UnplacedMessage(s.resource, ns), metav1.Now())
}

func (s unplacedAware) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	w := s.RESTCreateStrategy.WarningsOnCreate(ctx, obj)
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	if hasCondition(obj, PlacedCondition, NoPlacementReason) || (!hasConditions(obj) && s.unplacedNow(ctx, ns)) {
		w = append(w, placementadmission.UnplacedMessage(s.resource, ns))
	}
	return w
}

// unplacedNow asks again for kinds whose status has no conditions
// (Ingresses): they get the warning only.
func (s unplacedAware) unplacedNow(ctx context.Context, ns string) bool {
	cluster, ok := logicalcluster.From(ctx)
	return ok && !cluster.IsWildcard() && ns != "" && s.unplaced(ctx, cluster, ns)
}

// WithUnplaced wraps the storage providers of the workload resources'
// groups so that those resources get the create strategy above
// (withUnplaced). Providers of other groups stay as they are (a wrapper
// would hide their post-start hooks).
func WithUnplaced(in []controlplaneapiserver.RESTStorageProvider) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, 0, len(in))
	for _, p := range in {
		if slices.ContainsFunc(workload.WorkloadResources, func(gr schema.GroupResource) bool { return gr.Group == p.GroupName() }) {
			p = unplacedProvider{p}
		}
		out = append(out, p)
	}
	return out
}

type unplacedProvider struct {
	controlplaneapiserver.RESTStorageProvider
}

func (p unplacedProvider) NewRESTStorage(rc serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := p.RESTStorageProvider.NewRESTStorage(rc, getter)
	if err == nil && len(info.PrioritizedVersions) > 0 {
		withUnplaced(&info)
	}
	return info, err
}

// withUnplaced gives every workload resource of an API group the create
// strategy above. Any storage that embeds upstream's generic Store
// qualifies, so a workload kind added later gets it without more code.
func withUnplaced(info *genericapiserver.APIGroupInfo) {
	for _, storages := range info.VersionedResourcesStorageMap {
		for resource, storage := range storages {
			gr := schema.GroupResource{Group: info.PrioritizedVersions[0].Group, Resource: resource}
			if !workload.IsWorkloadResource(gr) {
				continue
			}
			if store := embeddedStore(storage); store != nil {
				store.CreateStrategy = unplacedAware{RESTCreateStrategy: store.CreateStrategy, resource: resource, unplaced: placementadmission.Unplaced}
			}
		}
	}
}

// embeddedStore finds the *genericregistry.Store a REST storage is or
// embeds (upstream's REST types are `struct{ *genericregistry.Store }`).
func embeddedStore(storage rest.Storage) *genericregistry.Store {
	if s, ok := storage.(*genericregistry.Store); ok {
		return s
	}
	v := reflect.ValueOf(storage)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("Store")
	if !f.IsValid() || !f.CanInterface() {
		return nil
	}
	s, _ := f.Interface().(*genericregistry.Store)
	return s
}

// conditions returns the addressable status.conditions slice of an
// internal object, if its kind has one.
func conditions(obj runtime.Object) (reflect.Value, bool) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	st := v.Elem().FieldByName("Status")
	if !st.IsValid() || st.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	c := st.FieldByName("Conditions")
	if !c.IsValid() || c.Kind() != reflect.Slice || c.Type().Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	return c, true
}

func hasConditions(obj runtime.Object) bool {
	_, ok := conditions(obj)
	return ok
}

// setCondition adds or replaces a condition of this type. Every condition
// type of the built-in workload kinds (and metav1.Condition) has the
// string fields Type, Status, Reason and Message; the times it has are set
// to now.
func setCondition(obj runtime.Object, typ, reason, message string, now metav1.Time) bool {
	c, ok := conditions(obj)
	if !ok {
		return false
	}
	cond := reflect.New(c.Type().Elem()).Elem()
	for name, value := range map[string]string{"Type": typ, "Status": "False", "Reason": reason, "Message": message} {
		f := cond.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.String {
			return false
		}
		f.SetString(value)
	}
	for _, name := range []string{"LastTransitionTime", "LastUpdateTime", "LastProbeTime"} {
		if f := cond.FieldByName(name); f.IsValid() && f.Type() == reflect.TypeOf(now) {
			f.Set(reflect.ValueOf(now))
		}
	}
	for i := 0; i < c.Len(); i++ {
		if c.Index(i).FieldByName("Type").String() == typ {
			c.Index(i).Set(cond)
			return true
		}
	}
	c.Set(reflect.Append(c, cond))
	return true
}

func hasCondition(obj runtime.Object, typ, reason string) bool {
	c, ok := conditions(obj)
	if !ok {
		return false
	}
	for i := 0; i < c.Len(); i++ {
		e := c.Index(i)
		if t := e.FieldByName("Type"); t.IsValid() && t.Kind() == reflect.String && t.String() == typ {
			r := e.FieldByName("Reason")
			return r.IsValid() && r.Kind() == reflect.String && r.String() == reason
		}
	}
	return false
}
