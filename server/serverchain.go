package server

import (
	"fmt"
	"net/http"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/controller/establish"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	openapibuilder3 "k8s.io/kube-openapi/pkg/builder3"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/notfoundhandler"
	"k8s.io/client-go/kubernetes"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	genericcp "k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/admission/apibinding"
	"github.com/kcpsql/kcp/server/clusterapf"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/server/podstreams"
	"github.com/kcpsql/kcp/server/rbacescalation"
	"github.com/kcpsql/kcp/server/tokenreview"
	"github.com/kcpsql/kcp/server/workloadapis"
	"github.com/kcpsql/kcp/storage/clusterstore"
)

// createServerChain assembles the three upstream servers (CRDs, built-in
// APIs, aggregator) like upstream's generic control plane does, with one
// change: TokenReview validates tokens in the review's logical cluster, and
// RBAC's escalation check sees the ClusterRoles root shares.
func createServerChain(c genericcp.CompletedConfig, crds *crdserving.Server, local *localwatch.Storages) (*aggregatorapiserver.APIAggregator, error) {
	notFound := notfoundhandler.New(c.ControlPlane.Generic.Serializer, genericapifilters.NoMuxAndDiscoveryIncompleteKey)
	apiExtensions, err := c.APIExtensions.New(genericapiserver.NewEmptyDelegateWithCustomHandler(notFound))
	if err != nil {
		return nil, fmt.Errorf("creating the CRD server: %w", err)
	}
	crdAPIEnabled := c.APIExtensions.GenericConfig.MergedResourceConfig.ResourceEnabled(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))

	// The built-in APIs' OpenAPI documents are installed below
	// (installOpenAPI: v2 built after the start, not before listening).
	c.ControlPlane.Generic.SkipOpenAPIInstallation = true
	native, err := c.ControlPlane.New("kcp", apiExtensions.GenericAPIServer)
	if err != nil {
		return nil, fmt.Errorf("creating the control plane server: %w", err)
	}
	client, err := kubernetes.NewForConfig(c.ControlPlane.Generic.LoopbackClientConfig)
	if err != nil {
		return nil, err
	}
	providers, err := c.ControlPlane.GenericStorageProviders(client.Discovery())
	if err != nil {
		return nil, fmt.Errorf("creating storage providers: %w", err)
	}
	providers = workloadapis.WithRefused(workloadapis.WithUnplaced(workloadapis.Providers(providers)))
	providers = tokenreview.WrapProviders(providers, c.ControlPlane.Generic.Authentication.Authenticator, c.ControlPlane.Generic.Authentication.APIAudiences)
	providers = rbacescalation.WrapProviders(providers, c.ControlPlane.Generic.Authorization.Authorizer)
	providers = clusterapf.WrapProviders(providers)
	providers = local.WrapProviders(providers)
	// kubectl top pods: metrics of the physical clusters that run a
	// workspace's pods (podstreams/metrics.go).
	providers = append(providers, podstreams.MetricsProvider{S: podstreams.Shared})
	if err := native.InstallAPIs(providers...); err != nil {
		return nil, fmt.Errorf("installing APIs: %w", err)
	}
	installOpenAPI(native.GenericAPIServer, c.ControlPlane.Generic.Config)
	priorities := controlplaneapiserver.DefaultGenericAPIServicePriorities()
	// As metrics-server registers it on a cluster.
	priorities[podstreams.MetricsGroupVersion] = controlplaneapiserver.APIServicePriority{Group: 100, Version: 100}
	agg, err := controlplaneapiserver.CreateAggregatorServer(c.Aggregator, native.GenericAPIServer,
		apiExtensions.Informers.Apiextensions().V1().CustomResourceDefinitions(), crdAPIEnabled, priorities)
	if err != nil {
		return nil, err
	}
	if err := setUpCRDServing(c, apiExtensions, notFound, agg, crds); err != nil {
		return nil, fmt.Errorf("setting up per-cluster CRDs: %w", err)
	}
	return agg, nil
}

// setUpCRDServing gives crdserving a factory of upstream CRD handlers (one
// per logical cluster, built on first use) configured like the upstream
// apiextensions server's own, and the groups it must leave alone.
func setUpCRDServing(c genericcp.CompletedConfig, ae *apiextensionsapiserver.CustomResourceDefinitions, notFound http.Handler,
	agg *aggregatorapiserver.APIAggregator, crds *crdserving.Server) error {
	x := c.APIExtensions
	// The definitions custom resources refer to (object and list metadata,
	// Scale), on which the type converters of server-side apply build.
	// Upstream passes the whole apiextensions API here; every cluster's
	// handler keeps its own converted copy, so only what custom resources
	// reference is given.
	static, err := openapibuilder3.BuildOpenAPIDefinitionsForResources(x.GenericConfig.OpenAPIV3Config,
		metav1.ObjectMeta{}.OpenAPIModelName(), metav1.ListMeta{}.OpenAPIModelName(), autoscalingv1.Scale{}.OpenAPIModelName())
	if err != nil {
		return err
	}
	// The upstream handler queues CRDs that have names but are not yet
	// established; crdlifecycle sets both at once, so this controller only
	// drains such keys (its view shows no CRD).
	establishing := establish.NewEstablishingController(crds.EmptyView(), nil)
	agg.GenericAPIServer.AddPostStartHookOrDie("kcp-crd-serving", func(hc genericapiserver.PostStartHookContext) error {
		go establishing.RunWithContext(hc.Context)
		return crds.Start(hc.Context, hc.LoopbackClientConfig)
	})
	newHandler := func(v *crdserving.View) (http.Handler, error) {
		// A cluster's own CRDs convert through its Services.
		resolver := x.ExtraConfig.AuthResolverWrapper
		if r := v.ConversionResolver(); r != nil {
			resolver = r
		}
		getter := x.ExtraConfig.CRDRESTOptionsGetter
		if v.Export() != "" {
			// An export's view: one store across all consumers, cached.
			getter = clusterstore.WrapAcrossClusters(getter)
		}
		return apiextensionsapiserver.NewCustomResourceDefinitionHandler(nil, nil, v, notFound,
			clusterstore.WithIdentity(getter, v.Identity), x.GenericConfig.AdmissionControl, establishing,
			x.ExtraConfig.ServiceResolver, resolver, 1, ae.GenericAPIServer.Authorizer,
			x.GenericConfig.RequestTimeout, time.Duration(x.GenericConfig.MinRequestTimeout)*time.Second,
			static, x.GenericConfig.MaxRequestBodyBytes)
	}
	crds.SetUp(newHandler, crdserving.ReservedGroups(agg.GenericAPIServer.ListedPaths(), tenancy.Group, workload.Group, apiresource.Group, apis.Group, "apiregistration.k8s.io", "apiextensions.k8s.io"))
	apibinding.SetReserved(crds.Reserved)
	return nil
}
