// Package workloadapis serves, in every logical cluster, the built-in
// workload APIs that kcp runs on physical clusters (Served: Deployments,
// StatefulSets, DaemonSets, Jobs, CronJobs, PodDisruptionBudgets,
// HorizontalPodAutoscalers, Ingresses, NetworkPolicies, Services,
// PersistentVolumeClaims and Pods). kcp runs no controller for them (no
// ReplicaSets, no Pods, no cluster IPs, no volumes): a syncer copies them
// to the physical cluster a Placement assigns their namespace to and copies
// their status back (docs/multicluster.md).
//
// They are served by upstream's own registry code (strategies, validation,
// defaulting, tables, the scale and status subresources) through the
// public RESTStorageProvider interface, so kubectl's create, expose, scale,
// set image, rollout status and strategic merge patches behave exactly as
// on a cluster. Only Services need storage of our own: upstream's Service
// REST allocates cluster IPs and node ports, which belong to the physical
// cluster; kcp stores Services with upstream's strategy and no allocator.
package workloadapis

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/discovery/install"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
	printerstorage "k8s.io/kubernetes/pkg/printers/storage"
	appsrest "k8s.io/kubernetes/pkg/registry/apps/rest"
	autoscalingrest "k8s.io/kubernetes/pkg/registry/autoscaling/rest"
	batchrest "k8s.io/kubernetes/pkg/registry/batch/rest"
	endpointstore "k8s.io/kubernetes/pkg/registry/core/endpoint/storage"
	pvcstore "k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim/storage"
	podstore "k8s.io/kubernetes/pkg/registry/core/pod/storage"
	svcreg "k8s.io/kubernetes/pkg/registry/core/service"
	discoveryrest "k8s.io/kubernetes/pkg/registry/discovery/rest"
	networkingrest "k8s.io/kubernetes/pkg/registry/networking/rest"
	policyrest "k8s.io/kubernetes/pkg/registry/policy/rest"

	"github.com/kcpsql/kcp/server/podstreams"
)

// Enable turns on exactly the workload resources in a resource
// configuration (not the rest of their groups: no ReplicationControllers,
// PodTemplates, LimitRanges, ...).
func Enable(rc *serverstorage.ResourceConfig) {
	rc.EnableResources(Served...)
}

// Served are the built-in workload resources Enable turns on: every kind
// an ordinary application's manifests use. Roles and RoleBindings (served
// by the generic control plane already) and ConfigMaps, Secrets and
// ServiceAccounts are not listed; workload.SyncedResources says which of
// all these a syncer copies.
var Served = []schema.GroupVersionResource{
	appsv1.SchemeGroupVersion.WithResource("deployments"),
	appsv1.SchemeGroupVersion.WithResource("statefulsets"),
	appsv1.SchemeGroupVersion.WithResource("daemonsets"),
	batchv1.SchemeGroupVersion.WithResource("jobs"),
	batchv1.SchemeGroupVersion.WithResource("cronjobs"),
	policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"),
	autoscalingv2.SchemeGroupVersion.WithResource("horizontalpodautoscalers"),
	autoscalingv1.SchemeGroupVersion.WithResource("horizontalpodautoscalers"),
	networkingv1.SchemeGroupVersion.WithResource("ingresses"),
	networkingv1.SchemeGroupVersion.WithResource("networkpolicies"),
	corev1.SchemeGroupVersion.WithResource("services"),
	corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"),
	corev1.SchemeGroupVersion.WithResource("pods"),
	// Projected from the physical clusters by the syncers, read-only for
	// tenants (schema/workload.ProjectedResources; events are served by
	// the generic control plane already).
	appsv1.SchemeGroupVersion.WithResource("replicasets"),
	appsv1.SchemeGroupVersion.WithResource("controllerrevisions"),
	corev1.SchemeGroupVersion.WithResource("endpoints"),
	discoveryv1.SchemeGroupVersion.WithResource("endpointslices"),
}

// Providers adds upstream's storage providers of the apps, batch, policy,
// autoscaling and networking.k8s.io groups (each serves only what Enable
// turned on) and Services, PersistentVolumeClaims and Pods to the core
// group's provider.
func Providers(in []controlplaneapiserver.RESTStorageProvider) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, 0, len(in)+5)
	for _, p := range in {
		if p.GroupName() == api.GroupName {
			p = withServices{p}
		}
		out = append(out, p)
	}
	return append(out, appsrest.StorageProvider{}, batchrest.RESTStorageProvider{}, policyrest.RESTStorageProvider{},
		autoscalingrest.RESTStorageProvider{}, networkingrest.RESTStorageProvider{}, discoveryrest.StorageProvider{})
}

type withServices struct {
	controlplaneapiserver.RESTStorageProvider
}

func (p withServices) NewRESTStorage(rc serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := p.RESTStorageProvider.NewRESTStorage(rc, getter)
	if err != nil || !rc.ResourceEnabled(corev1.SchemeGroupVersion.WithResource("services")) {
		return info, err
	}
	svc, status, err := newServiceStorage(getter)
	if err != nil {
		return info, err
	}
	if info.VersionedResourcesStorageMap["v1"] == nil {
		info.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{}
	}
	info.VersionedResourcesStorageMap["v1"]["services"] = svc
	info.VersionedResourcesStorageMap["v1"]["services/status"] = status
	if rc.ResourceEnabled(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")) {
		// Upstream's own PVC storage: kcp binds nothing; the physical
		// cluster's claim status is copied back.
		pvc, pvcStatus, err := pvcstore.NewREST(getter)
		if err != nil {
			return info, err
		}
		info.VersionedResourcesStorageMap["v1"]["persistentvolumeclaims"] = pvc
		info.VersionedResourcesStorageMap["v1"]["persistentvolumeclaims/status"] = pvcStatus
	}
	if rc.ResourceEnabled(corev1.SchemeGroupVersion.WithResource("pods")) {
		// Upstream's own Pod storage, the object and its status: a Pod
		// created in kcp (kubectl run) runs on a physical cluster.
		// Logs, exec, attach and port-forward are forwarded to the
		// physical cluster that runs the pod (podstreams); binding,
		// eviction and proxy would need a kubelet kcp does not have.
		pods, err := podstore.NewStorage(getter, nil, nil, nil, nil)
		if err != nil {
			return info, err
		}
		info.VersionedResourcesStorageMap["v1"]["pods"] = pods.Pod
		info.VersionedResourcesStorageMap["v1"]["pods/status"] = pods.Status
		for sub, st := range podstreams.Shared.Subresources(pods.Pod) {
			info.VersionedResourcesStorageMap["v1"][sub] = st
		}
	}
	if rc.ResourceEnabled(corev1.SchemeGroupVersion.WithResource("endpoints")) {
		// Upstream's own Endpoints storage: what the physical cluster
		// computed, projected by the syncer (kcp runs no endpoints
		// controller).
		endpoints, err := endpointstore.NewREST(getter)
		if err != nil {
			return info, err
		}
		info.VersionedResourcesStorageMap["v1"]["endpoints"] = endpoints
	}
	return info, nil
}

// serviceREST stores Services with upstream's strategy and without cluster
// IP or node port allocation: the physical cluster allocates its own, and
// the Service shows them (serviceallocation.go).
type serviceREST struct{ *genericregistry.Store }

func (*serviceREST) ShortNames() []string { return []string{"svc"} }
func (*serviceREST) Categories() []string { return []string{"all"} }

type serviceStatusREST struct{ store *genericregistry.Store }

func newServiceStorage(getter generic.RESTOptionsGetter) (*serviceREST, *serviceStatusREST, error) {
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &api.Service{} },
		NewListFunc:               func() runtime.Object { return &api.ServiceList{} },
		DefaultQualifiedResource:  api.Resource("services"),
		SingularQualifiedResource: api.Resource("service"),
		PredicateFunc:             svcreg.Matcher,

		CreateStrategy:      serviceStrategyWithIPs,
		UpdateStrategy:      serviceStrategyWithIPs,
		DeleteStrategy:      svcreg.Strategy,
		ResetFieldsStrategy: svcreg.Strategy,

		TableConvertor: printerstorage.TableConvertor{TableGenerator: printers.NewTableGenerator().With(printersinternal.AddHandlers)},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: getter, AttrFunc: svcreg.GetAttrs}); err != nil {
		return nil, nil, err
	}
	status := *store
	status.UpdateStrategy = serviceStatusStrategy{svcreg.StatusStrategy}
	status.ResetFieldsStrategy = svcreg.StatusStrategy
	return &serviceREST{store}, &serviceStatusREST{&status}, nil
}

func (r *serviceStatusREST) New() runtime.Object { return &api.Service{} }
func (r *serviceStatusREST) Destroy()            {}

func (r *serviceStatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

func (r *serviceStatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status updates never create a Service.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

func (r *serviceStatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *serviceStatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
