package crdserving

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/util/webhook"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Conversion webhooks served by a Service: a cluster's own CRDs convert
// through that Service of the cluster (its pods on a physical cluster,
// server/servicedial); everywhere else such CRDs are served at their
// storage version only.

// SetServiceConversions makes a cluster's own CRDs whose conversion
// webhook is served by a Service convert through it, with the credential
// resolver resolver(cluster) (outbound.Policy.AuthResolverWrapperFor: the
// Service's pods on a physical cluster). Call it before SetUp. Without it,
// and always for definitions of APIBindings and requests across clusters,
// such CRDs are served at their storage version only (ServiceConversion).
func (s *Server) SetServiceConversions(resolver func(cluster logicalcluster.Name) webhook.AuthenticationInfoResolverWrapper) {
	s.services = resolver
}

// ServiceConversion reports whether a CRD's conversion webhook is served
// by a Service, and its storage version. A cluster's own such CRD, in the
// cluster's view, converts through the Service of that cluster
// (SetServiceConversions). Elsewhere (an APIBinding's definition, whose
// Service would be another workspace's; requests across clusters) no
// Service is called: upstream's handler could not even be built for the
// CRD. It is served at its storage version (conversion None, which at the
// storage version converts nothing), and a request at another version is
// refused (Wrap).
func ServiceConversion(crd *apiextensionsv1.CustomResourceDefinition) (storage string, ok bool) {
	c := crd.Spec.Conversion
	if c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ClientConfig == nil || c.Webhook.ClientConfig.Service == nil {
		return "", false
	}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
	}
	return storage, true
}

// ConversionResolver is the credential resolver of the view's conversion
// webhooks served by a Service, nil if the view calls none.
func (v *View) ConversionResolver() webhook.AuthenticationInfoResolverWrapper {
	if v.s.services == nil || v.identity != "" || v.cluster == "" || v.cluster.IsWildcard() {
		return nil
	}
	return v.s.services(v.cluster)
}

// callsService reports whether a CRD of a cluster converts through its
// conversion webhook's Service: the cluster's own CRD, when the server
// calls Services.
func (s *Server) callsService(sc scope, crd *apiextensionsv1.CustomResourceDefinition) bool {
	return s.services != nil && sc.identity == "" && !sc.cluster.IsWildcard() && s.HasLocal(sc.cluster, crd.Name)
}

// servable is crd as the upstream handler may serve it in the view
// (ServiceConversion).
func (v *View) servable(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	if _, ok := ServiceConversion(crd); !ok || v.s.callsService(v.scope(), crd) {
		return crd
	}
	out := crd.DeepCopy()
	out.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	return out
}

// unconvertible refuses a request at a version of a CRD that only its
// conversion webhook, served by a Service, could convert to.
func (s *Server) unconvertible(sc scope, info *apirequest.RequestInfo) (string, bool) {
	name := info.Resource + "." + info.APIGroup
	var crd *apiextensionsv1.CustomResourceDefinition
	if sc.identity == "" && !sc.cluster.IsWildcard() {
		crd, _ = s.CRD(sc.cluster, name)
	} else if sc.identity == "" {
		crd, _ = s.wildcardCRD(name)
	}
	if crd == nil {
		return "", false
	}
	storage, ok := ServiceConversion(crd)
	if !ok || info.APIVersion == storage || s.callsService(sc, crd) {
		return "", false
	}
	svc := crd.Spec.Conversion.Webhook.ClientConfig.Service
	return fmt.Sprintf("%s is served at its storage version %s only here: converting to %s needs its conversion webhook, the Service %s/%s, "+
		"which kcp calls only for the CRDs of the Service's own workspace, requested in that workspace; "+
		"request %s/%s", name, storage, info.APIVersion, svc.Namespace, svc.Name, info.APIGroup, storage), true
}
