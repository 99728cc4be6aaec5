package workloadapis

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	api "k8s.io/kubernetes/pkg/apis/core"
	svcreg "k8s.io/kubernetes/pkg/registry/core/service"
)

// serviceStrategy is upstream's Service strategy plus what upstream's
// Service REST does before it, short of allocating: kcp allocates no
// cluster IP or node port (each physical cluster allocates its own) and
// shows those of the physical cluster that runs the Service
// (serviceallocation.go); clusterIP and clusterIPs are kept in step as
// upstream keeps them, so that a client may set either. A headless Service
// (clusterIP: None) is accepted as on a cluster; without this, validation
// asks for spec.clusterIPs.
type serviceStrategy struct {
	rest.RESTCreateUpdateStrategy
}

var serviceStrategyWithIPs = serviceStrategy{svcreg.Strategy}

func (s serviceStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.RESTCreateUpdateStrategy.PrepareForCreate(ctx, obj)
	if svc, ok := obj.(*api.Service); ok {
		syncClusterIPs(svc)
		for _, w := range showAllocation(svc, nil, foldAllocations(svc, nil)) {
			warning.AddWarning(ctx, "", w)
		}
	}
}

func (s serviceStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.RESTCreateUpdateStrategy.PrepareForUpdate(ctx, obj, old)
	svc, ok := obj.(*api.Service)
	oldSvc, oldOK := old.(*api.Service)
	if !ok || !oldOK {
		return
	}
	syncClusterIPs(svc)
	for _, w := range showAllocation(svc, oldSvc, foldAllocations(svc, oldSvc)) {
		warning.AddWarning(ctx, "", w)
	}
}

func (s serviceStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return withoutAllocationRequired(obj, s.RESTCreateUpdateStrategy.Validate(ctx, obj))
}

func (s serviceStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	svc, ok := obj.(*api.Service)
	oldSvc, oldOK := old.(*api.Service)
	if ok && oldOK {
		old = validationBase(svc, oldSvc)
	}
	return withoutAllocationRequired(obj, s.RESTCreateUpdateStrategy.ValidateUpdate(ctx, obj, old))
}

// withoutAllocationRequired drops validation's demand for a health check
// node port that upstream's REST would have allocated before validating:
// the physical cluster allocates it, and kcp shows it once reported.
func withoutAllocationRequired(obj runtime.Object, errs field.ErrorList) field.ErrorList {
	svc, ok := obj.(*api.Service)
	if !ok || !needsHealthCheck(svc) || svc.Spec.HealthCheckNodePort != 0 {
		return errs
	}
	out := errs[:0:0]
	for _, e := range errs {
		if e.Type != field.ErrorTypeRequired || e.Field != "spec.healthCheckNodePort" {
			out = append(out, e)
		}
	}
	return out
}

// serviceStatusStrategy is upstream's status strategy (the spec stays as
// it was) plus the allocations: a syncer reports its cluster's through the
// status subresource (its own annotation), and the spec shows them in the
// same write.
type serviceStatusStrategy struct {
	rest.RESTUpdateStrategy
}

func (s serviceStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.RESTUpdateStrategy.PrepareForUpdate(ctx, obj, old)
	svc, ok := obj.(*api.Service)
	oldSvc, oldOK := old.(*api.Service)
	if ok && oldOK {
		showAllocation(svc, oldSvc, foldAllocations(svc, oldSvc))
	}
}

// syncClusterIPs fills clusterIPs from clusterIP or clusterIP from
// clusterIPs when a client set only one of them. Anything else (the two
// disagreeing, an invalid address) is left to upstream's validation.
func syncClusterIPs(svc *api.Service) {
	if svc.Spec.Type == api.ServiceTypeExternalName {
		return
	}
	switch {
	case svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) == 0:
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	case svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) > 0:
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}
}
