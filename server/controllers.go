package server

import (
	"context"
	"fmt"
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"

	"github.com/kcpsql/kcp/server/admission/namespacelifecycle"
	"github.com/kcpsql/kcp/server/clusterrbac"
	"github.com/kcpsql/kcp/server/controllers/garbagecollector"
	"github.com/kcpsql/kcp/server/controllers/namespacedefaults"
	"github.com/kcpsql/kcp/server/controllers/namespacedeletion"
	"github.com/kcpsql/kcp/server/controllers/workspace"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/server/systemcrds"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// addControllers registers kcp's shared machinery as post-start hooks: it
// runs once per process, watches all logical clusters, and /readyz waits for
// the hooks, so a ready server has its APIs installed.
func addControllers(s *genericapiserver.GenericAPIServer, o *CompletedOptions, rbac *clusterrbac.Authorizer,
	clusters *logicalclusters.Registry, deleteClusterData func(context.Context, logicalcluster.Name) (int, error)) {
	s.AddPostStartHookOrDie("kcp-service-account-tokens", func(hc genericapiserver.PostStartHookContext) error {
		o.TokenGetter.SetLoopback(hc.LoopbackClientConfig)
		return nil
	})
	s.AddPostStartHookOrDie("kcp-namespace-lifecycle", func(hc genericapiserver.PostStartHookContext) error {
		return namespacelifecycle.Start(hc.Context, hc.LoopbackClientConfig)
	})
	s.AddPostStartHookOrDie("kcp-cluster-rbac", func(hc genericapiserver.PostStartHookContext) error {
		return rbac.Start(hc.Context, hc.LoopbackClientConfig)
	})
	s.AddPostStartHookOrDie("kcp-namespace-deletion", func(hc genericapiserver.PostStartHookContext) error {
		c, err := namespacedeletion.NewController(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		go c.Run(hc.Context, 2)
		return nil
	})
	s.AddPostStartHookOrDie("kcp-namespace-defaults", func(hc genericapiserver.PostStartHookContext) error {
		ca, err := os.ReadFile(o.PKI.CACert())
		if err != nil {
			return err
		}
		c, err := namespacedefaults.NewController(hc.LoopbackClientConfig, string(ca), clusters.Exists)
		if err != nil {
			return err
		}
		go c.Run(hc.Context, 2)
		return nil
	})
	s.AddPostStartHookOrDie("kcp-garbage-collector", func(hc genericapiserver.PostStartHookContext) error {
		c, err := garbagecollector.NewController(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		go c.Run(hc.Context, 4)
		return nil
	})
	s.AddPostStartHookOrDie("kcp-root-clusterrole-aggregation", func(hc genericapiserver.PostStartHookContext) error {
		// Fills admin, edit and view (and other aggregated ClusterRoles) in
		// root; every logical cluster shares them through clusterrbac.
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		factory := informers.NewSharedInformerFactory(client, 0)
		c := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), client.RbacV1())
		factory.Start(hc.Context.Done())
		go c.Run(hc.Context, 1)
		return nil
	})
	s.AddPostStartHookOrDie("kcp-tenancy", func(hc genericapiserver.PostStartHookContext) error {
		if err := systemcrds.Install(hc.Context, hc.LoopbackClientConfig); err != nil {
			return fmt.Errorf("installing the tenancy.kcp.io CRDs: %v", err)
		}
		if err := clusters.Start(hc.Context, hc.LoopbackClientConfig); err != nil {
			return err
		}
		c, err := workspace.NewController(hc.LoopbackClientConfig, o.ServerURL, deleteClusterData)
		if err != nil {
			return err
		}
		go c.Run(hc.Context, 8)
		return nil
	})
}
