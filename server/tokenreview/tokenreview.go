// Package tokenreview makes upstream's TokenReview API validate tokens in the
// logical cluster the review was posted to. Upstream's REST handler
// authenticates a synthetic request with an empty context, so the cluster
// would be lost; here each review runs upstream's handler with an
// authenticator bound to the review's cluster.
package tokenreview

import (
	"context"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	genericregistry "k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	upstream "k8s.io/kubernetes/pkg/registry/authentication/tokenreview"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// WrapProviders replaces the TokenReview storage of the authentication
// provider in providers; the others are returned as they are.
func WrapProviders(providers []controlplaneapiserver.RESTStorageProvider, authn authenticator.Request, audiences []string) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, len(providers))
	for i, p := range providers {
		if p.GroupName() == "authentication.k8s.io" {
			p = provider{RESTStorageProvider: p, authn: authn, audiences: audiences}
		}
		out[i] = p
	}
	return out
}

type provider struct {
	controlplaneapiserver.RESTStorageProvider
	authn     authenticator.Request
	audiences []string
}

func (p provider) NewRESTStorage(src serverstorage.APIResourceConfigSource, getter genericregistry.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := p.RESTStorageProvider.NewRESTStorage(src, getter)
	if err != nil {
		return info, err
	}
	for _, storage := range info.VersionedResourcesStorageMap {
		if s, ok := storage["tokenreviews"].(*upstream.REST); ok {
			storage["tokenreviews"] = &REST{REST: s, authn: p.authn, audiences: p.audiences}
		}
	}
	return info, nil
}

// REST is upstream's TokenReview storage, run per review with an
// authenticator bound to the review's cluster.
type REST struct {
	*upstream.REST
	authn     authenticator.Request
	audiences []string
}

var _ rest.Creater = &REST{}

func (r *REST) Create(ctx context.Context, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	bound := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		return r.authn.AuthenticateRequest(req.WithContext(logicalcluster.WithCluster(req.Context(), cluster)))
	})
	return upstream.NewREST(bound, r.audiences).Create(ctx, obj, validate, opts)
}
