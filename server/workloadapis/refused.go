package workloadapis

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	_ "k8s.io/kubernetes/pkg/apis/discovery/install"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
	printerstorage "k8s.io/kubernetes/pkg/printers/storage"

	"github.com/kcpsql/kcp/schema/workload"
)

// builtIn is the namespaced part of upstream Kubernetes' API (v1.37, each
// group's preferred version) that applications' manifests use. What kcp
// does not serve of it is listed in discovery with a storage that explains
// itself (refusedStorage): without it, kubectl fails before sending a
// request, with "no matches for kind ... ensure CRDs are installed first",
// which sends the user the wrong way. A kind kcp serves (now or later, a
// workload kind added to the providers) is its own and is not touched.
var builtIn = []schema.GroupVersionKind{
	{Version: "v1", Kind: "Pod"},
	{Version: "v1", Kind: "PersistentVolumeClaim"},
	{Version: "v1", Kind: "ReplicationController"},
	{Version: "v1", Kind: "PodTemplate"},
	{Version: "v1", Kind: "LimitRange"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Group: "batch", Version: "v1", Kind: "CronJob"},
	{Group: "autoscaling", Version: "v2", Kind: "HorizontalPodAutoscaler"},
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"},
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"},
}

// resourceOf is the resource name of a built-in kind (Endpoints is the one
// whose plural is not the kind's).
func resourceOf(kind string) string {
	l := strings.ToLower(kind)
	switch {
	case l == "endpoints":
		return l
	case strings.HasSuffix(l, "y"):
		return strings.TrimSuffix(l, "y") + "ies"
	case strings.HasSuffix(l, "s"):
		return l + "es"
	}
	return l + "s"
}

// WithRefused adds the storage that explains itself for every built-in
// kind of the table that no provider serves: into the provider of its
// group if there is one, else in a provider of its own for the group.
func WithRefused(in []controlplaneapiserver.RESTStorageProvider) []controlplaneapiserver.RESTStorageProvider {
	byGroup := map[string][]schema.GroupVersionKind{}
	for _, gvk := range builtIn {
		byGroup[gvk.Group] = append(byGroup[gvk.Group], gvk)
	}
	out := make([]controlplaneapiserver.RESTStorageProvider, 0, len(in)+len(byGroup))
	for _, p := range in {
		if kinds, ok := byGroup[p.GroupName()]; ok {
			p = refusingProvider{RESTStorageProvider: p, group: p.GroupName(), kinds: kinds}
			delete(byGroup, p.GroupName())
		}
		out = append(out, p)
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		out = append(out, refusingProvider{group: g, kinds: byGroup[g]})
	}
	return out
}

// refusingProvider adds refused storages to a provider's group (inner
// nil: a group of its own).
type refusingProvider struct {
	controlplaneapiserver.RESTStorageProvider
	group string
	kinds []schema.GroupVersionKind
}

func (p refusingProvider) GroupName() string { return p.group }

func (p refusingProvider) NewRESTStorage(rc serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	var info genericapiserver.APIGroupInfo
	if p.RESTStorageProvider != nil {
		var err error
		if info, err = p.RESTStorageProvider.NewRESTStorage(rc, getter); err != nil {
			return info, err
		}
	}
	if len(info.PrioritizedVersions) == 0 {
		info = genericapiserver.NewDefaultAPIGroupInfo(p.group, legacyscheme.Scheme, legacyscheme.ParameterCodec, legacyscheme.Codecs)
		info.PrioritizedVersions = nil // only the versions below
	}
	if info.VersionedResourcesStorageMap == nil {
		info.VersionedResourcesStorageMap = map[string]map[string]rest.Storage{}
	}
	for _, gvk := range p.kinds {
		resource := resourceOf(gvk.Kind)
		if _, served := info.VersionedResourcesStorageMap[gvk.Version][resource]; served {
			continue
		}
		s, err := newRefused(gvk, resource)
		if err != nil {
			return info, err
		}
		if info.VersionedResourcesStorageMap[gvk.Version] == nil {
			info.VersionedResourcesStorageMap[gvk.Version] = map[string]rest.Storage{}
			if !hasVersion(info.PrioritizedVersions, gvk.Version) {
				info.PrioritizedVersions = append(info.PrioritizedVersions, gvk.GroupVersion())
			}
		}
		info.VersionedResourcesStorageMap[gvk.Version][resource] = s
	}
	return info, nil
}

func hasVersion(gvs []schema.GroupVersion, v string) bool {
	for _, gv := range gvs {
		if gv.Version == v {
			return true
		}
	}
	return false
}

// refusedStorage answers for a built-in kind kcp does not serve, as a
// cluster with none of them would, and refuses to store one with a message
// naming the kind, what kcp runs and how to get more:
//
//   - list: empty; watch: nothing happens (discovery-driven clients, and
//     kcp's own namespace deletion and garbage collection, see none);
//   - get: 404 with the message;
//   - create, update, patch (server-side apply too): 405 with the message.
//
// It offers no delete, so controllers that delete what discovery lists
// (namespace deletion, garbage collection, quota) leave it alone.
type refusedStorage struct {
	rest.TableConvertor
	gvk      schema.GroupVersionKind
	resource string
	newObj   func() runtime.Object
	newList  func() runtime.Object
}

var (
	_ rest.Getter  = &refusedStorage{}
	_ rest.Lister  = &refusedStorage{}
	_ rest.Watcher = &refusedStorage{}
	_ rest.Creater = &refusedStorage{}
	_ rest.Updater = &refusedStorage{}
)

func newRefused(gvk schema.GroupVersionKind, resource string) (*refusedStorage, error) {
	internal := schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal}
	for _, k := range []string{gvk.Kind, gvk.Kind + "List"} {
		if !legacyscheme.Scheme.Recognizes(internal.WithKind(k)) {
			return nil, fmt.Errorf("built-in kind %s of %s is not in the scheme", k, internal)
		}
	}
	mk := func(kind string) func() runtime.Object {
		return func() runtime.Object {
			o, _ := legacyscheme.Scheme.New(internal.WithKind(kind))
			return o
		}
	}
	// Upstream's printers, where they print the kind (kubectl get shows
	// its columns), else name and age (LimitRanges have no printer).
	var tables rest.TableConvertor = rest.NewDefaultTableConvertor(schema.GroupResource{Group: gvk.Group, Resource: resource})
	printer := printerstorage.TableConvertor{TableGenerator: printers.NewTableGenerator().With(printersinternal.AddHandlers)}
	if _, err := printer.ConvertToTable(context.Background(), mk(gvk.Kind+"List")(), nil); err == nil {
		tables = printer
	}
	return &refusedStorage{
		TableConvertor: tables,
		gvk:            gvk, resource: resource, newObj: mk(gvk.Kind), newList: mk(gvk.Kind + "List"),
	}, nil
}

func (s *refusedStorage) New() runtime.Object     { return s.newObj() }
func (s *refusedStorage) NewList() runtime.Object { return s.newList() }
func (s *refusedStorage) Destroy()                {}
func (s *refusedStorage) NamespaceScoped() bool   { return true }
func (s *refusedStorage) GetSingularName() string { return strings.ToLower(s.gvk.Kind) }
func (s *refusedStorage) Kind() string            { return s.gvk.Kind }
func (s *refusedStorage) groupResource() schema.GroupResource {
	return s.gvk.GroupVersion().WithResource(s.resource).GroupResource()
}

// Message is what a refused kind answers.
func (s *refusedStorage) Message() string { return RefusedMessage(s.gvk, s.resource) }

// RefusedMessage names a built-in kind kcp does not serve, what kcp runs
// on physical clusters instead, and how to get more.
func RefusedMessage(gvk schema.GroupVersionKind, resource string) string {
	var runs []string
	for _, gr := range workload.WorkloadResources {
		runs = append(runs, gr.String())
	}
	return fmt.Sprintf("kcp does not serve %s (%s, %s) in this workspace: a workspace runs on physical clusters "+
		"the kinds %s (with the configmaps, secrets and serviceaccounts they use), placed by a Placement. "+
		"A CRD of the physical clusters can be imported for placed workspaces (the syncer's --resources or the SyncTarget's spec.resources); "+
		"a built-in kind that kcp does not run has to be applied to a physical cluster directly. "+
		"See docs/multicluster.md (\"Kinds kcp does not run\")",
		gvk.Kind, gvk.GroupVersion(), schema.GroupResource{Group: gvk.Group, Resource: resource}, strings.Join(runs, ", "))
}

func (s *refusedStorage) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Details: &metav1.StatusDetails{Group: s.gvk.Group, Kind: s.resource, Name: name},
		Message: s.Message(),
	}}
}

func (s *refusedStorage) List(context.Context, *metainternalversion.ListOptions) (runtime.Object, error) {
	return s.newList(), nil
}

func (s *refusedStorage) Watch(context.Context, *metainternalversion.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

func (s *refusedStorage) refuse(name string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
		Details: &metav1.StatusDetails{Group: s.gvk.Group, Kind: s.resource, Name: name},
		Message: s.Message(),
	}}
}

func (s *refusedStorage) Create(_ context.Context, obj runtime.Object, _ rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	name := ""
	if m, ok := obj.(metav1.Object); ok {
		name = m.GetName()
	}
	return nil, s.refuse(name)
}

func (s *refusedStorage) Update(_ context.Context, name string, _ rest.UpdatedObjectInfo, _ rest.ValidateObjectFunc,
	_ rest.ValidateObjectUpdateFunc, _ bool, _ *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return nil, false, s.refuse(name)
}
