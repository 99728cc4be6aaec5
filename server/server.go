package server

import (
	"context"
	"database/sql"
	"fmt"
	"k8s.io/kubernetes/pkg/capabilities"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/storage/cacher/consistency"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	genericcp "k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"

	"github.com/kcpsql/kcp/migrations"
	"github.com/kcpsql/kcp/schema/tenancy"
	apibindingadmission "github.com/kcpsql/kcp/server/admission/apibinding"
	"github.com/kcpsql/kcp/server/admission/crdlimits"
	placementadmission "github.com/kcpsql/kcp/server/admission/placement"
	"github.com/kcpsql/kcp/server/admission/workspacelimits"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusterapf"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/clusterrbac"
	"github.com/kcpsql/kcp/server/controllers/crdlifecycle"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/server/errorlimit"
	"github.com/kcpsql/kcp/server/exportview"
	"github.com/kcpsql/kcp/server/frozen"
	"github.com/kcpsql/kcp/server/healthreasons"
	"github.com/kcpsql/kcp/server/incarnations"
	"github.com/kcpsql/kcp/server/inmemory"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/server/memlimit"
	"github.com/kcpsql/kcp/server/memreturn"
	"github.com/kcpsql/kcp/server/moved"
	"github.com/kcpsql/kcp/server/movepeer"
	"github.com/kcpsql/kcp/server/negotiated"
	"github.com/kcpsql/kcp/server/panics"
	"github.com/kcpsql/kcp/server/podstreams"
	"github.com/kcpsql/kcp/server/requester"
	"github.com/kcpsql/kcp/server/requestlimits"
	"github.com/kcpsql/kcp/server/routing"
	"github.com/kcpsql/kcp/server/servicedial"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/server/syncerview"
	"github.com/kcpsql/kcp/server/tenantslots"
	"github.com/kcpsql/kcp/storage/auditevents"
	"github.com/kcpsql/kcp/storage/changehistory"
	"github.com/kcpsql/kcp/storage/clusterdata"
	"github.com/kcpsql/kcp/storage/clusterstore"
	"github.com/kcpsql/kcp/storage/embeddedkine"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/restore"
)

// CacheConsistencyCheckPeriod is how often each watch cache is compared
// with the datastore (upstream: 5 minutes; see Run).
const CacheConsistencyCheckPeriod = time.Hour

// Run migrates the datastore, starts kine and serves until ctx ends; then it
// drains requests and closes the database.
func Run(ctx context.Context, o *CompletedOptions) error {
	start := time.Now()
	stopStartProfile := startProfile()
	// No tenant's object may end the process (see package panics).
	panics.Install()
	// Pods run on physical clusters, never here: whether a tenant's pod may
	// be privileged is the location's decision (SyncTarget spec.podSecurity,
	// enforced by placement admission and the physical cluster), not a
	// fixed "disallowed by cluster policy" of kcp's validation.
	capabilities.Setup(true, 0)
	// Before anything fills a cache: the start-up fill is what needs it.
	limit, err := memlimit.Set(o.MemoryLimitRatio, os.Getenv("GOMEMLIMIT"), func() (uint64, string, error) { return memlimit.FromCgroup(os.DirFS("/")) })
	if err != nil {
		return err
	}
	if limit.Limit > 0 {
		klog.InfoS("Go soft memory limit", "limitMiB", limit.Limit>>20, "from", limit.Reason)
	} else {
		klog.InfoS("no Go soft memory limit", "because", limit.Reason)
	}
	if err := o.Datastore.Prepare(ctx); err != nil {
		return err
	}
	st, err := migrations.Up(ctx, o.Datastore)
	if err != nil {
		return err
	}
	kinePool, serverPool := o.Datastore.Pools(o.DatastoreMaxConnections)
	db, err := o.Datastore.OpenPool(serverPool)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := changehistory.Configure(ctx, db, o.Datastore.Dialect, o.ChangeHistory); err != nil {
		return fmt.Errorf("datastore %s: configuring the change history: %v", o.Datastore, err)
	}
	if o.ChangeHistory && o.Retention > 0 {
		go changehistory.KeepWithin(ctx, db, o.Datastore.Dialect, o.Retention)
	}
	klog.InfoS("datastore ready", "datastore", o.Datastore.String(), "schemaVersion", st.Version, "took", time.Since(start).Round(time.Millisecond))

	kcfg := embeddedkine.NewConfig(o.Datastore, o.RootDir)
	kcfg.Notify = o.DatastoreNotify
	kcfg.Pool = embeddedkine.PoolConfig(kinePool)
	if !o.StoreDefaults {
		ca, err := os.ReadFile(o.PKI.CACert())
		if err != nil {
			return err
		}
		kcfg.ServedDefaultsCA = string(ca)
	}
	kcfg.CompactInterval, kcfg.CompactMinRetain = o.CompactInterval, o.CompactMinRetain
	kcfg.DB = db
	kine, err := embeddedkine.Start(kcfg)
	if err != nil {
		return err
	}
	defer kine.Stop()
	clusterstore.LatestRevision = kine.HandedRevision
	clusterstore.NewClient = kine.Client
	clusterstore.ListObjects, clusterstore.ConvertObject = kine.ListObjects, convertServed
	// Upstream's watch cache consistency check lists every cached resource
	// from the cache and again from the datastore every 5 to 7.5 minutes.
	// Here one cache holds a resource of every logical cluster: at 10,000
	// empty workspaces the checks doubled an idle server's CPU (2.2% -> 4.4%
	// of a core) and kept 13 KiB more RSS per workspace, and they grow with
	// the installation (docs/performance.md). Checked hourly, they still
	// catch a cache that drifted; --feature-gates=DetectCacheInconsistency=false
	// turns them off.
	consistency.CheckPeriod = CacheConsistencyCheckPeriod

	rbac, clusters := clusterrbac.New(), logicalclusters.New()
	clusters.ReadStored(kine.Range, kine.Watch)
	// A cluster a move took to another shard is served no more here: its
	// open watches end (server/moved).
	movedWatches := moved.NewWatches()
	clusters.OnMoved(movedWatches.Close)
	var movePeer *movepeer.Server
	if o.Shards.Sharded() {
		movePeer = &movepeer.Server{Self: o.Shards.Self, Clusters: clusters, Kine: kine, CAFile: o.Shards.Files.CACert()}
	}
	if o.Shards.Sharded() {
		// References from a workspace to another one that only work
		// within a shard for now refuse a workspace of another shard with
		// the reason, not as if it did not exist (APIBindings work across
		// shards: SetRemoteBind below).
		elsewhere := func(c logicalcluster.Name) string {
			if exists, _ := clusters.State(c); exists {
				return ""
			}
			return fmt.Sprintf("workspace %s is not on this shard (%s)", c, o.Shards.Self)
		}
		placementadmission.SetElsewhere(elsewhere)
	}
	var parentAccess func(context.Context, logicalcluster.Name, user.Info) (bool, bool)
	if pa := shards.NewParentAccess(o.Shards, clusters.OwnerShard); pa != nil {
		parentAccess = pa.Allowed
	}
	config, err := newConfig(o.Upstream, rbac, clusters, parentAccess)
	if err != nil {
		return err
	}
	// The server's own clients (controllers, informers, post-start hooks)
	// reach it in memory, not through TLS to its port (server/inmemory).
	// Clients upstream built while configuring (its shared informer
	// factory) keep their TLS connections.
	loopback := inmemory.New()
	for _, c := range []*rest.Config{config.ControlPlane.Generic.LoopbackClientConfig,
		config.APIExtensions.GenericConfig.LoopbackClientConfig, config.Aggregator.GenericConfig.LoopbackClientConfig} {
		loopback.Use(c)
	}
	crds := crdserving.New(o.CRDHandlerIdle)
	// A cluster's own CRD wins over a binding (which then reports the
	// conflict). Negotiated APIs are served through bindings too.
	boundAPIs := boundapis.New(crds.HasLocal)
	negotiatedAPIs := negotiated.New(boundAPIs)
	crds.AddExtra(boundAPIs)
	crds.SetExported(boundAPIs.ExportDefinitions)
	boundAPIs.OnChange(crds.Invalidate)
	boundAPIs.OnExportChange(func(provider logicalcluster.Name, name string) {
		if !crds.ServesExports() {
			return // nothing to drop (and no export to look up, at start-up)
		}
		// Only that export's view is rebuilt (with its watch cache); an
		// export's identity comes from its UID, so it stays while the
		// export exists. A deleted export cannot be looked up any more:
		// every export's view is dropped.
		if e, _ := boundAPIs.Export(provider, name); e != nil {
			crds.InvalidateExport(e.Identity)
			return
		}
		crds.InvalidateExports()
	})
	crds.Listen(boundAPIs.CRDHandler())
	if o.Shards.Sharded() {
		// An export of a workspace on another shard is resolved from this
		// shard's copy of that shard's APIs (boundapis.StartPeers), and
		// binding it is decided by that shard's RBAC.
		local := func(c logicalcluster.Name) bool { exists, _ := clusters.State(c); return exists }
		boundAPIs.SetLocal(local)
		reviewer := shards.NewReviewer(o.Shards)
		apibindingadmission.SetRemoteBind(remoteBind(reviewer, boundAPIs, local))
		exportview.SetRemote(remoteContent(reviewer, boundAPIs, local))
	}
	apibindingadmission.SetBound(boundAPIs.Bound)
	apibindingadmission.SetUsers(apibindingadmission.Users{Consumers: boundAPIs.Consumers, ExportsUsing: boundAPIs.ExportsUsing, ConsumersOutside: boundAPIs.ConsumersOutside, HoldsExports: boundAPIs.HoldsExports, Unknown: boundAPIs.UnsyncedPeers})
	placementadmission.SetNegotiated(negotiatedAPIs.Resources)
	placementadmission.SetBuiltInSchemas(negotiatedAPIs.BuiltInSchemas)
	crdlimits.SetCRDs(crds.LocalCRDs)
	createRevision, closeRevisions, err := incarnations.EtcdCreateRevision(o.Upstream.Etcd.StorageConfig.Transport.ServerList[0], o.Upstream.Etcd.StorageConfig.Prefix)
	if err != nil {
		return err
	}
	defer closeRevisions()
	began := &incarnations.Tracker{CreateRevision: createRevision}
	podstreams.Shared.SetLimits(o.PodStreams)
	makeClusterAware(config, crds, boundAPIs, began, clusters, movedWatches, movePeer)
	// A logical cluster serves requests from the moment its LogicalCluster
	// is stored, so it is stored Ready (and with its URL): one status write
	// less per workspace. Its Workspace stays Initializing until the
	// workspace controller has made its namespaces and bindings.
	config.APIExtensions.ExtraConfig.CRDRESTOptionsGetter = clusterstore.WithOnCreate(config.APIExtensions.ExtraConfig.CRDRESTOptionsGetter,
		tenancy.LogicalClustersResource.GroupResource(), logicalclusters.StoredReady(o.WorkspaceURL))
	// API priority and fairness shares the server between logical clusters
	// (clusterapf); one controller serves all three servers of the chain.
	var apf *clusterapf.FlowControl
	if f := config.Aggregator.GenericConfig.FlowControl; f != nil {
		apf = clusterapf.Wrap(f, o.TenantMaxInflight, o.TenantMaxStartingWatches)
		config.ControlPlane.Generic.FlowControl, config.APIExtensions.GenericConfig.FlowControl, config.Aggregator.GenericConfig.FlowControl = apf, apf, apf
	}
	// Conversion webhooks of tenants' CRDs call what the tenant wrote; the
	// policy decides where that may be (docs/tenancy.md).
	config.APIExtensions.ExtraConfig.AuthResolverWrapper = o.Outbound.AuthResolverWrapper()
	// Webhooks served by a Service of a workspace call its pods on a
	// physical cluster (servicedial), admission and conversion alike.
	o.Outbound.Services = servicedial.Shared
	crds.SetServiceConversions(o.Outbound.AuthResolverWrapperFor)
	if o.AuditToDB {
		if err := auditToDatastore(config, o, db); err != nil {
			return err
		}
	}
	completed, err := config.Complete()
	if err != nil {
		return err
	}
	// The server's informers of built-in resources list and watch them in
	// process, from the storages the chain installs (server/localwatch).
	local := localwatch.New()
	chain, err := createServerChain(completed, crds, local)
	if err != nil {
		return err
	}
	workspacelimits.Configure(&workspacelimits.Config{Defaults: o.WorkspaceLimits, Limits: clusters.Limits,
		Count: func(ctx context.Context, c logicalcluster.Name) (int64, int64, error) {
			return clusterdata.Usage(ctx, db, o.Datastore.Dialect, c)
		}})
	deleteClusterData := func(ctx context.Context, c logicalcluster.Name) (int, error) {
		return clusterdata.DeleteAll(ctx, db, o.Datastore.Dialect, kine, c)
	}
	if movePeer != nil {
		movePeer.Source = restore.Source{DB: db, Dialect: o.Datastore.Dialect, Background: kine.Background}
		movePeer.DeleteClusterData = deleteClusterData
	}
	addControllers(chain.GenericAPIServer, o, rbac, clusters, crds, negotiatedAPIs, boundAPIs, apf, deleteClusterData, kine.Range, kine.RangeRows, kine.RangeChanged, kine.Watch, kine, local,
		restore.Source{DB: db, Dialect: o.Datastore.Dialect, Background: kine.Background}, kine)
	if err := chain.GenericAPIServer.AddReadyzChecks(kine.Health); err != nil {
		return err
	}
	chain.GenericAPIServer.AddPostStartHookOrDie("kcp-ready-message", func(hc genericapiserver.PostStartHookContext) error {
		go func() {
			if waitReady(hc.Context, hc.LoopbackClientConfig) {
				stopStartProfile()
				klog.InfoS("kcp is ready", "server", o.ServerURL, "kubeconfig", o.PKI.AdminKubeconfig(), "datastore", o.Datastore.String(), "took", time.Since(start).Round(time.Millisecond))
			}
		}()
		return nil
	})
	// Give back what the start-up cache fill (and later bursts) leave free.
	go memreturn.Run(ctx)
	prepared, err := chain.PrepareRun()
	if err != nil {
		return err
	}
	stopLoopback := loopback.Serve(chain.GenericAPIServer.Handler)
	defer stopLoopback()
	if err := prepared.Run(ctx); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	klog.InfoS("kcp stopped; closing the datastore")
	return nil
}

// makeClusterAware hooks our layers into the upstream configuration: every
// server's storage goes through clusterstore and the
// outermost handler chain starts with requestlimits and routing
// (authentication and authorization were made cluster-aware by newConfig).
func makeClusterAware(c *genericcp.Config, crds *crdserving.Server, boundAPIs *boundapis.Index, began *incarnations.Tracker, clusters *logicalclusters.Registry,
	movedWatches *moved.Watches, movePeer *movepeer.Server) {
	// Upstream's system-namespaces controller waits for the shared namespace
	// informer, which is started only if it was requested before the
	// informers start; request it now so root gets its default namespace.
	c.ControlPlane.VersionedInformers.Core().V1().Namespaces().Informer()
	// One process serves; upstream's sample assumes three API servers and
	// then waits five seconds before establishing each CRD.
	c.APIExtensions.ExtraConfig.MasterCount = 1
	// The upstream apiextensions server (its CRD handler, discovery, OpenAPI
	// and controllers) sees only the system cluster: its CRDs are served in
	// every cluster. Each cluster's own CRDs are served by crdserving.
	c.APIExtensions.GenericConfig.LoopbackClientConfig = clusterinformer.ForCluster(c.APIExtensions.GenericConfig.LoopbackClientConfig, crdserving.SystemCluster)
	c.ControlPlane.Generic.RESTOptionsGetter = clusterstore.Wrap(c.ControlPlane.Generic.RESTOptionsGetter)
	// A new CRD is stored with conditions (Established false, names being
	// checked), so that kubectl wait --for=condition=Established finds a
	// list to wait on from the first moment.
	c.APIExtensions.GenericConfig.RESTOptionsGetter = clusterstore.WithOnCreate(c.APIExtensions.GenericConfig.RESTOptionsGetter,
		apiextensionsv1.Resource("customresourcedefinitions"), crdlifecycle.InitialConditions)
	// Custom resources are not in the watch cache, kcp's own (tenancy.kcp.io,
	// one store per resource for all clusters) included: measured with
	// 1,000 workspaces, caching Workspaces and LogicalClusters added ~21 KiB
	// of live heap per workspace (unstructured objects, managed fields as
	// nested maps) and no measurable creation rate (docs/performance.md).
	c.APIExtensions.ExtraConfig.CRDRESTOptionsGetter = clusterstore.WrapPerCluster(c.APIExtensions.ExtraConfig.CRDRESTOptionsGetter)
	c.Aggregator.GenericConfig.RESTOptionsGetter = clusterstore.Wrap(c.Aggregator.GenericConfig.RESTOptionsGetter)

	inner := c.Aggregator.GenericConfig.BuildHandlerChainFunc
	c.Aggregator.GenericConfig.BuildHandlerChainFunc = func(h http.Handler, gc *genericapiserver.Config) http.Handler {
		// After authorization: reads at resource versions from before a
		// cluster's current incarnation answer 410 (incarnations), and a
		// frozen workspace refuses writes (frozen).
		// healthreasons: /readyz?verbose says why a check fails to those
		// who may read the check's own endpoint (system:masters).
		h = healthreasons.WithReasons(h, gc.Authorization.Authorizer)
		routed := routing.WithLogicalCluster(errorlimit.WithLimit(tenantslots.WithHolder(requester.WithHolder(inner(moved.WithMoved(frozen.WithFrozen(incarnations.WithIncarnations(crds.Wrap(h), began), clusters.FreezeOf), clusters.MovedTo, movedWatches), gc)))))
		view, err := syncerview.New(routed, gc.Authentication.Authenticator, gc.Authorization.Authorizer, gc.LoopbackClientConfig, boundAPIs)
		if err != nil {
			klog.Fatalf("building the syncer view: %v", err)
		}
		// Pod streams: the syncers' tunnels, next to their view.
		if err := podstreams.Shared.SetUp(gc.LoopbackClientConfig, gc.Authorization.Authorizer); err != nil {
			klog.Fatalf("setting up pod streams: %v", err)
		}
		if err := servicedial.Shared.SetUp(gc.LoopbackClientConfig); err != nil {
			klog.Fatalf("setting up service dials: %v", err)
		}
		tunnels := podstreams.Shared.WithTunnels(view, gc.Authentication.Authenticator, gc.Authorization.Authorizer)
		exports := exportview.New(tunnels, gc.Authentication.Authenticator, gc.Authorization.Authorizer, boundAPIs, crds)
		// The shards' move API (server/movepeer) checks the caller's
		// certificate itself, before anything else of the chain.
		movePeer.SetLoopback(gc.LoopbackClientConfig)
		return requestlimits.WithURILimit(movePeer.Wrap(exports))
	}
}

// waitReady waits until /readyz passes; false if ctx ends first.
func waitReady(ctx context.Context, cfg *rest.Config) bool {
	return waitHealthy(ctx, cfg, "/readyz", 50*time.Millisecond, http.StatusOK)
}

// waitHealthy asks path every interval until it answers one of codes.
func waitHealthy(ctx context.Context, cfg *rest.Config, path string, interval time.Duration, codes ...int) bool {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var code int
		client.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&code)
		if slices.Contains(codes, code) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// auditToDatastore adds the audit_events backend to the outermost server,
// next to any upstream backend, with the upstream policy file.
func auditToDatastore(c *genericcp.Config, o *CompletedOptions, db *sql.DB) error {
	g := c.Aggregator.GenericConfig
	if g.AuditPolicyRuleEvaluator == nil {
		p, err := policy.LoadPolicyFromFile(o.Upstream.Audit.PolicyFile)
		if err != nil {
			return fmt.Errorf("--audit-policy-file: %v", err)
		}
		g.AuditPolicyRuleEvaluator = policy.NewPolicyRuleEvaluator(p)
	}
	clusterOf := func(e *auditinternal.Event) string {
		if c, ok := e.Annotations[clusterauthz.AuditAnnotation]; ok {
			return c
		}
		return "" // rejected before authorization (authentication failed)
	}
	b := auditevents.New(db, o.Datastore.Dialect, clusterOf, o.AuditRetention)
	if g.AuditBackend != nil {
		g.AuditBackend = audit.Union(g.AuditBackend, b)
	} else {
		g.AuditBackend = b
	}
	return nil
}

// StartProfileEnv names a file for a CPU profile of the start-up, from the
// process's start until it is ready (docs/operations.md).
const StartProfileEnv = "KCP_START_CPU_PROFILE"

func startProfile() func() {
	path := os.Getenv(StartProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		klog.ErrorS(err, "no start-up CPU profile", "env", StartProfileEnv)
		return func() {}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
			klog.InfoS("start-up CPU profile written", "file", path)
		})
	}
}
