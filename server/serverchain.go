package server

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/notfoundhandler"
	"k8s.io/client-go/kubernetes"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	genericcp "k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"

	"github.com/kcpsql/kcp/server/tokenreview"
)

// createServerChain assembles the three upstream servers (CRDs, built-in
// APIs, aggregator) like upstream's generic control plane does, with one
// change: TokenReview validates tokens in the review's logical cluster.
func createServerChain(c genericcp.CompletedConfig) (*aggregatorapiserver.APIAggregator, error) {
	notFound := notfoundhandler.New(c.ControlPlane.Generic.Serializer, genericapifilters.NoMuxAndDiscoveryIncompleteKey)
	apiExtensions, err := c.APIExtensions.New(genericapiserver.NewEmptyDelegateWithCustomHandler(notFound))
	if err != nil {
		return nil, fmt.Errorf("creating the CRD server: %w", err)
	}
	crdAPIEnabled := c.APIExtensions.GenericConfig.MergedResourceConfig.ResourceEnabled(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))

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
	providers = tokenreview.WrapProviders(providers, c.ControlPlane.Generic.Authentication.Authenticator, c.ControlPlane.Generic.Authentication.APIAudiences)
	if err := native.InstallAPIs(providers...); err != nil {
		return nil, fmt.Errorf("installing APIs: %w", err)
	}
	return controlplaneapiserver.CreateAggregatorServer(c.Aggregator, native.GenericAPIServer,
		apiExtensions.Informers.Apiextensions().V1().CustomResourceDefinitions(), crdAPIEnabled,
		controlplaneapiserver.DefaultGenericAPIServicePriorities())
}
