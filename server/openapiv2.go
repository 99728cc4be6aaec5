package server

import (
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/klog/v2"
	builder2 "k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// installOpenAPI serves the built-in APIs' OpenAPI documents, as upstream's
// PrepareRun does (the server must be configured with
// SkipOpenAPIInstallation), except that the v2 document is built after
// the server is ready, or on its first request if that comes sooner.
// Upstream builds it from every route while preparing to serve, before
// the server listens: 0.15-0.45 s of CPU in every start, for a document
// kubectl asks for only on some commands (it prefers v3, which is served
// as before). Call it once every built-in API is installed.
func installOpenAPI(s *genericapiserver.GenericAPIServer, c *genericapiserver.Config) {
	container, mux := s.Handler.GoRestfulContainer, s.Handler.NonGoRestfulMux
	if c.OpenAPIConfig != nil {
		config := c.OpenAPIConfig
		v2 := cached.Once(cached.Func(func() (*spec.Swagger, string, error) {
			doc, err := builder2.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices(container.RegisteredWebServices()), config)
			if err != nil {
				klog.ErrorS(err, "building the OpenAPI v2 document of the built-in APIs")
				return nil, "", err
			}
			doc.Definitions = handler.PruneDefaults(doc.Definitions)
			return doc, "", nil
		}))
		s.OpenAPIVersionedService = handler.NewOpenAPIServiceLazy(v2)
		s.OpenAPIVersionedService.RegisterOpenAPIVersionedService("/openapi/v2", mux)
		s.AddPostStartHookOrDie("kcp-openapi-v2", func(hc genericapiserver.PostStartHookContext) error {
			go func() {
				if waitReady(hc.Context, hc.LoopbackClientConfig) {
					_, _, _ = v2.Get()
				}
			}()
			return nil
		})
	}
	if c.OpenAPIV3Config != nil {
		s.OpenAPIV3VersionedService = routes.OpenAPI{V3Config: c.OpenAPIV3Config}.InstallV3(container, mux)
	}
}
