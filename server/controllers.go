package server

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/admission/namespacelifecycle"
	placementadmission "github.com/kcpsql/kcp/server/admission/placement"
	saadmission "github.com/kcpsql/kcp/server/admission/serviceaccount"
	"github.com/kcpsql/kcp/server/admission/workspacetype"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusteradmission"
	"github.com/kcpsql/kcp/server/clusterapf"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/clusterrbac"
	"github.com/kcpsql/kcp/server/controllers/apibinding"
	"github.com/kcpsql/kcp/server/controllers/crdlifecycle"
	"github.com/kcpsql/kcp/server/controllers/garbagecollector"
	"github.com/kcpsql/kcp/server/controllers/namespacedefaults"
	"github.com/kcpsql/kcp/server/controllers/namespacedeletion"
	"github.com/kcpsql/kcp/server/controllers/negotiation"
	"github.com/kcpsql/kcp/server/controllers/placement"
	"github.com/kcpsql/kcp/server/controllers/pushsyncer"
	"github.com/kcpsql/kcp/server/controllers/sharestatus"
	"github.com/kcpsql/kcp/server/controllers/synctarget"
	"github.com/kcpsql/kcp/server/controllers/workspace"
	"github.com/kcpsql/kcp/server/controllers/workspacemove"
	"github.com/kcpsql/kcp/server/controllers/workspacerestore"
	"github.com/kcpsql/kcp/server/controllers/workspacesnapshot"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/server/leaderelection"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/server/negotiated"
	"github.com/kcpsql/kcp/server/podstreams"
	"github.com/kcpsql/kcp/server/resourcequota"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/server/systemcrds"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/restore"
)

// addControllers registers kcp's shared machinery as post-start hooks: it
// runs once per process, watches all logical clusters, and /readyz waits for
// the hooks, so a ready server has its APIs installed.
// workspaceWorkers is how many Workspaces the workspace controller brings
// up at once. Each takes about four sequential round trips through the
// loopback API and the datastore (its LogicalCluster, its namespaces in
// parallel, its status), so the creation rate is the number of workers
// divided by that latency: with 8 workers the server stayed half idle
// while workspaces queued (docs/performance.md).
const workspaceWorkers = 32

func addControllers(s *genericapiserver.GenericAPIServer, o *CompletedOptions, rbac *clusterrbac.Authorizer,
	clusters *logicalclusters.Registry, crds *crdserving.Server, negotiatedAPIs *negotiated.Index, boundAPIs *boundapis.Index, apf *clusterapf.FlowControl, deleteClusterData func(context.Context, logicalcluster.Name) (int, error),
	stored, rows, changed clusterinformer.RangeFunc, watched clusterinformer.WatchFunc, writes workspace.Storage, local *localwatch.Storages,
	history restore.Source, restores restore.Writer) {
	shared := &clusterinformer.Shared{Local: local}
	var campaign atomic.Pointer[leaderelection.Campaign]
	s.AddPostStartHookOrDie("kcp-service-account-tokens", func(hc genericapiserver.PostStartHookContext) error {
		return o.TokenGetter.Start(hc.Context, hc.LoopbackClientConfig)
	})
	s.AddPostStartHookOrDie("kcp-namespace-lifecycle", func(hc genericapiserver.PostStartHookContext) error {
		namespaces, err := shared.Namespaces(hc.Context, hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		namespacelifecycle.Start(namespaces, hc.LoopbackClientConfig)
		return nil
	})
	s.AddPostStartHookOrDie("kcp-service-account-admission", func(hc genericapiserver.PostStartHookContext) error {
		return saadmission.Start(hc.LoopbackClientConfig)
	})
	s.AddPostStartHookOrDie("kcp-resource-quota", func(hc genericapiserver.PostStartHookContext) error {
		return resourcequota.Start(hc.Context, hc.LoopbackClientConfig, local)
	})
	s.AddPostStartHookOrDie("kcp-admission-policies-webhooks", func(hc genericapiserver.PostStartHookContext) error {
		namespaces, err := shared.Namespaces(hc.Context, hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		return clusteradmission.Start(hc.Context, hc.LoopbackClientConfig, namespaces, local)
	})
	if apf != nil {
		s.AddPostStartHookOrDie("kcp-tenant-priority-and-fairness", func(hc genericapiserver.PostStartHookContext) error {
			return apf.Start(hc.Context, hc.LoopbackClientConfig)
		})
	}
	s.AddPostStartHookOrDie("kcp-cluster-rbac", func(hc genericapiserver.PostStartHookContext) error {
		return rbac.Start(hc.Context, hc.LoopbackClientConfig, local)
	})
	s.AddPostStartHookOrDie("kcp-tenancy", func(hc genericapiserver.PostStartHookContext) error {
		if err := systemcrds.Install(hc.Context, clusterinformer.ForCluster(hc.LoopbackClientConfig, crdserving.SystemCluster)); err != nil {
			return fmt.Errorf("installing the tenancy.kcp.io, workload.kcp.io, apiresource.kcp.io and apis.kcp.io CRDs: %v", err)
		}
		// The registry's first list of every LogicalCluster is the longest
		// step of a start with many workspaces: it runs while the steps
		// below wait on their own lists and writes.
		registered := make(chan error, 1)
		if o.Shards.Sharded() {
			// Clusters held here for a parent on another shard: their data
			// goes when that shard deletes their LogicalCluster.
			children := workspace.NewShardChildren(deleteClusterData, clusters.State)
			clusters.OnDeleting(children.Deleting)
			go children.Run(hc.Context)
		}
		go func() { registered <- clusters.Start(hc.Context, hc.LoopbackClientConfig) }()
		// Watches of kcp's own resources start once their CRDs exist (before,
		// their first lists fail and back off for seconds).
		if err := placementadmission.Start(hc.Context, hc.LoopbackClientConfig); err != nil {
			return err
		}
		if err := workspacetype.Start(hc.LoopbackClientConfig); err != nil {
			return err
		}
		if err := systemcrds.InstallBuiltInTypes(hc.Context, hc.LoopbackClientConfig); err != nil {
			return fmt.Errorf("creating the built-in workspace types in root: %v", err)
		}
		if err := negotiatedAPIs.Start(hc.Context, hc.LoopbackClientConfig); err != nil {
			return err
		}
		if err := boundAPIs.Start(hc.Context, hc.LoopbackClientConfig); err != nil {
			return err
		}
		if o.Shards.Sharded() {
			peers := map[string]*rest.Config{}
			for _, name := range o.Shards.Config.Names() {
				if name == o.Shards.Self {
					continue
				}
				cfg, err := o.Shards.Peer(name)
				if err != nil {
					return err
				}
				peers[name] = cfg
			}
			if err := boundAPIs.StartPeers(hc.Context, peers); err != nil {
				return err
			}
		}
		if err := <-registered; err != nil {
			return err
		}
		ca, err := os.ReadFile(o.PKI.CACert())
		if err != nil {
			return err
		}
		namespaces, err := shared.Namespaces(hc.Context, hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		writers := func(ctx context.Context) {
			startWriters(ctx, hc.LoopbackClientConfig, o.WorkspaceURL, o.Shards, string(ca), !o.StoreDefaults, o.GCDiscoveryPeriod, clusters, crds, deleteClusterData, namespaces, stored, rows, changed, watched, writes, local)
			if c, err := synctarget.NewController(hc.LoopbackClientConfig, o.SyncTargetHeartbeatTimeout); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "SyncTarget heartbeat controller")
			}
			if c, err := negotiation.NewController(hc.LoopbackClientConfig); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "API negotiation controller")
			}
			if c, err := pushsyncer.NewController(hc.LoopbackClientConfig, o.PushMode, o.Outbound, o.ServerURL, ca); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "push-mode syncers")
			}
			if c, err := placement.NewController(hc.LoopbackClientConfig, o.PlacementEvictionDelay, o.PlacementEvictionRate, negotiatedAPIs, namespaces, local); err == nil {
				go c.Run(ctx, 8) // I/O-bound: each namespace is a few loopback lists and writes
			} else {
				klog.ErrorS(err, "placement controller")
			}
			if c, err := clusteradmission.NewTypeCheckController(hc.LoopbackClientConfig); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "admission policy type checking")
			}
			if c, err := apibinding.NewController(hc.LoopbackClientConfig, boundAPIs); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "API binding status controller")
			}
			if c, err := sharestatus.NewController(hc.LoopbackClientConfig, local, namespaces); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "share status controller")
			}
			if c, err := sharestatus.NewOneTargetController(hc.LoopbackClientConfig); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "one-target status controller")
			}
			// One bound for all restores of this server (the controller's
			// workers write through the same paced writer).
			if c, err := workspacerestore.NewController(hc.LoopbackClientConfig, history, restore.Paced(restores, o.RestoreWritesPerSecond), clusters.Frozen); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "workspace restore controller")
			}
			if o.Shards.Sharded() {
				if c, err := workspacemove.NewController(hc.LoopbackClientConfig, o.Shards); err == nil {
					go c.Run(ctx, 2)
				} else {
					klog.ErrorS(err, "workspace move controller")
				}
			}
			if c, err := workspacesnapshot.NewController(hc.LoopbackClientConfig, history); err == nil {
				go c.Run(ctx, 2)
			} else {
				klog.ErrorS(err, "workspace snapshot controller")
			}
		}
		// The writers' informers list every object of their resources as
		// soon as that resource's watch cache is filled; at start-up they
		// would compete with the caches still filling and with the lists
		// /readyz waits for (at 100,000 workspaces the config maps' fill
		// took 5 s longer while the service accounts and namespaces were
		// listed), so they start once /readyz passes. Nothing /readyz
		// waits for needs them. (Upstream's storage-readiness check is not
		// enough: it does not wait for the namespaces' cache.)
		afterFill := func(ctx context.Context) {
			if waitReady(ctx, hc.LoopbackClientConfig) {
				writers(ctx)
			}
		}
		if o.Datastore.Dialect == datastore.SQLite {
			// One process owns a SQLite file: no election, no wait on restart.
			go afterFill(hc.Context)
			return nil
		}
		// Controllers that write run on one replica at a time.
		campaign.Store(leaderelection.Start(hc.Context, hc.LoopbackClientConfig, "kcp-controllers", afterFill))
		return nil
	})
	// On a graceful stop, give the lease up while the server still serves,
	// so that another replica (or this one, restarted) runs the controllers
	// at once instead of after the lease expires.
	// Open pod streams (logs -f through a syncer's tunnel) end at once:
	// the client sees its stream end instead of waiting out the graceful
	// shutdown's timeout.
	s.AddPreShutdownHookOrDie("kcp-pod-streams", func() error {
		podstreams.Shared.Stop()
		return nil
	})
	s.AddPreShutdownHookOrDie("kcp-controllers-lease", func() error {
		if c := campaign.Load(); c != nil {
			c.Release(5 * time.Second)
		}
		return nil
	})
}

// startWriters starts the controllers that write; they stop with ctx (when
// this replica loses the lease).
func startWriters(ctx context.Context, loopback *rest.Config, serverURL string, membership *shards.Membership, caPEM string, servedDefaults bool, gcDiscoveryPeriod time.Duration,
	clusters *logicalclusters.Registry, crds *crdserving.Server, deleteClusterData func(context.Context, logicalcluster.Name) (int, error),
	namespaces *clusterinformer.Namespaces, stored, rows, changed clusterinformer.RangeFunc, watched clusterinformer.WatchFunc, writes workspace.Storage, local *localwatch.Storages) {
	if c, err := namespacedeletion.NewController(loopback, namespaces); err == nil {
		go c.Run(ctx, 2)
	} else {
		klog.ErrorS(err, "namespace deletion controller")
	}
	// The collector hears of Workspaces through the workspace controller's
	// informer: one list of every Workspace at start, not two.
	gc, gcErr := garbagecollector.NewController(loopback, crds.ServedVersion)
	var gcFeeds []clusterinformer.Consumer
	if gcErr == nil {
		gc.SetDiscoveryPeriod(gcDiscoveryPeriod)
		gc.ReadRows(rows)
		gc.WatchLocal(local)
		gcFeeds = append(gcFeeds, gc.Feed(tenancy.WorkspacesResource, tenancy.WorkspacesResource.GroupVersion().WithKind("Workspace"), false))
	}
	if c, err := workspace.NewController(loopback, serverURL, writes, deleteClusterData, clusters.Names, clusters.State, clusters.Limits, gcFeeds...); err == nil {
		if servedDefaults {
			c.OwnerBindingServed()
		}
		c.ReadStored(stored, watched)
		c.LimitsSynced(clusters.Synced)
		c.SyncFrozen(func(n logicalcluster.Name) string { return clusters.FreezeOf(n).Reason })
		c.Shards(membership)
		go c.Run(ctx, workspaceWorkers)
	} else {
		klog.ErrorS(err, "workspace controller")
	}
	if c, err := namespacedefaults.NewController(loopback, caPEM, clusters.State, namespaces, servedDefaults, local, changed); err == nil {
		go c.Run(ctx, 2)
	} else {
		klog.ErrorS(err, "namespace defaults controller")
	}
	if c, err := crdlifecycle.NewController(loopback, crds); err == nil {
		go c.Run(ctx, 2)
	} else {
		klog.ErrorS(err, "CRD lifecycle controller")
	}
	if gcErr == nil {
		go gc.Run(ctx, 4)
	} else {
		klog.ErrorS(gcErr, "garbage collector")
	}
	// Fills admin, edit and view (and other aggregated ClusterRoles) in
	// root; every logical cluster shares them through clusterrbac.
	if client, err := kubernetes.NewForConfig(loopback); err == nil {
		factory := informers.NewSharedInformerFactory(client, 0)
		c := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), client.RbacV1())
		factory.Start(ctx.Done())
		go c.Run(ctx, 1)
	}
}
