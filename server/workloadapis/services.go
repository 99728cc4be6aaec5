package workloadapis

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"
	svcreg "k8s.io/kubernetes/pkg/registry/core/service"
)

// serviceStrategy is upstream's Service strategy plus what upstream's
// Service REST does before it, short of allocating: kcp allocates no
// cluster IP (each physical cluster allocates its own), but clusterIP and
// clusterIPs are kept in step as upstream keeps them, so that a client may
// set either. A headless Service (clusterIP: None) is accepted as on a
// cluster; without this, validation asks for spec.clusterIPs.
type serviceStrategy struct {
	rest.RESTCreateUpdateStrategy
}

var serviceStrategyWithIPs = serviceStrategy{svcreg.Strategy}

func (s serviceStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.RESTCreateUpdateStrategy.PrepareForCreate(ctx, obj)
	if svc, ok := obj.(*api.Service); ok {
		syncClusterIPs(svc)
	}
}

func (s serviceStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.RESTCreateUpdateStrategy.PrepareForUpdate(ctx, obj, old)
	if svc, ok := obj.(*api.Service); ok {
		syncClusterIPs(svc)
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
