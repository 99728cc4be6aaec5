// Package server assembles kcp: the upstream generic control plane
// (k8s.io/kubernetes pkg/controlplane/apiserver, unmodified) made
// cluster-aware through public extension points (handler chain, storage
// decorator, authorizer), on an embedded kine. It follows upstream's steps:
// Options -> CompletedOptions -> Config -> Server.
package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	mutatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	cliflag "k8s.io/component-base/cli/flag"
	cpoptions "k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	genericcp "k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"
	saadmission "k8s.io/kubernetes/plugin/pkg/admission/serviceaccount"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/admission/apibinding"
	"github.com/kcpsql/kcp/server/admission/crdlimits"
	"github.com/kcpsql/kcp/server/admission/logicalclusterprotection"
	"github.com/kcpsql/kcp/server/admission/namespacelifecycle"
	"github.com/kcpsql/kcp/server/admission/placement"
	"github.com/kcpsql/kcp/server/admission/projection"
	"github.com/kcpsql/kcp/server/admission/pushsecret"
	kcpserviceaccount "github.com/kcpsql/kcp/server/admission/serviceaccount"
	"github.com/kcpsql/kcp/server/admission/webhookurls"
	"github.com/kcpsql/kcp/server/admission/workspacelimits"
	"github.com/kcpsql/kcp/server/admission/workspaceowner"
	"github.com/kcpsql/kcp/server/admission/workspaceshard"
	"github.com/kcpsql/kcp/server/admission/workspacetype"
	"github.com/kcpsql/kcp/server/clusteradmission"
	"github.com/kcpsql/kcp/server/outbound"
	"github.com/kcpsql/kcp/server/pki"
	"github.com/kcpsql/kcp/server/podstreams"
	kcpquota "github.com/kcpsql/kcp/server/resourcequota"
	"github.com/kcpsql/kcp/server/satokens"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/embeddedkine"
)

// Options are the flags of `kcp start`.
type Options struct {
	RootDir   string
	Datastore string
	// DatastoreNotify wakes kine on PostgreSQL notifications.
	DatastoreNotify bool
	// DatastoreMaxConnections bounds the connections to PostgreSQL.
	DatastoreMaxConnections int
	// StoreDefaults stores the defaults storage/serveddefaults serves.
	StoreDefaults bool
	// ChangeHistory records every object change in kcp_changes.
	ChangeHistory          bool
	ChangeHistoryRetention time.Duration
	// RestoreWritesPerSecond bounds the writes of all WorkspaceRestores
	// together (storage/restore.Paced); 0: no bound.
	RestoreWritesPerSecond float64
	// KineCompactInterval and KineCompactMinRetain tune kine's compaction
	// of old revisions.
	KineCompactInterval  time.Duration
	KineCompactMinRetain int64
	// AuditToDatastore writes audit events into audit_events.
	AuditToDatastore bool
	AuditRetention   time.Duration
	// CRDHandlerIdle drops a logical cluster's custom-resource serving
	// state after this long without requests.
	CRDHandlerIdle time.Duration
	// TenantMaxInflight bounds the requests one workspace other than root
	// executes at once (clusterapf); 0 sets no bound.
	TenantMaxInflight int
	// TenantMaxStartingWatches bounds the watches of one such workspace
	// that are sending their initial objects at once (clusterapf); 0 sets
	// no bound.
	TenantMaxStartingWatches int
	// MemoryLimitRatio sets the Go soft memory limit to this share of the
	// container's (cgroup's) memory limit, unless GOMEMLIMIT is set; 0
	// leaves it alone (server/memlimit).
	MemoryLimitRatio float64
	// Upstream holds the generic control plane's options; kcp sets the
	// storage, serving, authentication and service-account defaults.
	Upstream *cpoptions.Options
	// TokenGetter resolves service-account tokens in the request's cluster.
	TokenGetter *satokens.Getter
	// CRDLimits caps what one logical cluster's CRDs may cost.
	CRDLimits *crdlimits.Limits
	// WorkspaceLimits are the caps of every workspace (but root) that sets
	// none of its own in its Workspace's spec.limits; 0: none.
	WorkspaceLimits tenancy.Limits
	// SyncTargetHeartbeatTimeout is how long a SyncTarget stays Ready
	// without a heartbeat from its syncer.
	SyncTargetHeartbeatTimeout time.Duration
	// PushMode lets kcp run the syncers of SyncTargets that ask for it.
	PushMode bool
	// PlacementEvictionDelay is how long a namespace stays on a NotReady
	// SyncTarget before it moves to another.
	PlacementEvictionDelay time.Duration
	// PlacementEvictionRate bounds how many SyncTargets per second start
	// handing their namespaces away because they are NotReady or
	// NoExecute-tainted; 0: no bound.
	PlacementEvictionRate float64
	// PodStreams bound the logs, exec, attach and port-forward streams kcp
	// forwards to physical clusters.
	PodStreams podstreams.Limits
	// GCDiscoveryPeriod is how often the garbage collector looks for
	// resources to watch (new custom resources) and stops watching those no
	// longer served.
	GCDiscoveryPeriod time.Duration
	// WebhookAllowedNetworks may be reached by tenants' webhook URLs although
	// outbound refuses them by default (loopback, private, link-local).
	WebhookAllowedNetworks []net.IPNet
	// Outbound is the policy for tenants' webhook URLs; Complete fills it in
	// from WebhookAllowedNetworks (the admission plugin holds it already).
	Outbound *outbound.Policy
	// ShardName, ShardsFile, WorkspaceShard: see AddFlags; Shards is
	// filled from them by Complete (admission reads it).
	ShardName      string
	ShardsFile     string
	WorkspaceShard string
	// WorkspaceShardPolicy: --workspace-shard-policy (shards.Policies).
	WorkspaceShardPolicy string
	Shards               *shards.Membership
}

// clusterUnawarePlugins read their configuration through informers of the
// root logical cluster only. Enabled, they would apply root's webhooks,
// policies, quotas and namespace state to every tenant, so they are off;
// kcp's namespacelifecycle, resourcequota and clusteradmission run them (or
// their evaluators) per logical cluster instead.
var clusterUnawarePlugins = []string{
	lifecycle.PluginName,
	resourcequota.PluginName,
	mutatingwebhook.PluginName,
	validatingwebhook.PluginName,
	validatingpolicy.PluginName,
	mutatingpolicy.PluginName,
	saadmission.PluginName,
}

// NewOptions returns the defaults: SQLite in .kcp, https://127.0.0.1:6443.
func NewOptions() *Options {
	up := genericcp.NewOptions()
	up.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	up.SecureServing.BindPort = 6443
	up.Etcd.DefaultStorageMediaType = "application/json"
	// On SIGTERM, open watches get this long to end before the server
	// closes them; without it the server waits for them up to its request
	// timeout (60 s), longer than an orchestrator's usual 30 s grace period.
	// Writes in flight drain first (upstream's shutdown order).
	up.GenericServerRunOptions.ShutdownWatchTerminationGracePeriod = 3 * time.Second
	up.Authorization.Modes = []string{"RBAC"}
	up.Admission.GenericAdmission.DisablePlugins = append(up.Admission.GenericAdmission.DisablePlugins, clusterUnawarePlugins...)
	workspaceowner.Register(up.Admission.GenericAdmission.Plugins)
	workspacetype.Register(up.Admission.GenericAdmission.Plugins)
	namespacelifecycle.Register(up.Admission.GenericAdmission.Plugins)
	crdLimits := crdlimits.DefaultLimits
	crdlimits.Register(up.Admission.GenericAdmission.Plugins, &crdLimits)
	logicalclusterprotection.Register(up.Admission.GenericAdmission.Plugins)
	placement.Register(up.Admission.GenericAdmission.Plugins)
	pushsecret.Register(up.Admission.GenericAdmission.Plugins)
	projection.Register(up.Admission.GenericAdmission.Plugins)
	apibinding.Register(up.Admission.GenericAdmission.Plugins)
	workspacelimits.Register(up.Admission.GenericAdmission.Plugins)
	kcpquota.Register(up.Admission.GenericAdmission.Plugins)
	kcpserviceaccount.Register(up.Admission.GenericAdmission.Plugins)
	policy := &outbound.Policy{}
	membership := &shards.Membership{}
	opts := &Options{Shards: membership}
	workspaceshard.Register(up.Admission.GenericAdmission.Plugins, membership, &opts.WorkspaceShard, &opts.WorkspaceShardPolicy)
	webhookurls.Register(up.Admission.GenericAdmission.Plugins, policy)
	clusteradmission.Register(up.Admission.GenericAdmission.Plugins, policy)
	// Namespace lifecycle first, as upstream orders its own plugin.
	up.Admission.GenericAdmission.RecommendedPluginOrder = append([]string{namespacelifecycle.PluginName},
		append(up.Admission.GenericAdmission.RecommendedPluginOrder, workspaceowner.PluginName, workspacetype.PluginName, workspaceshard.PluginName, logicalclusterprotection.PluginName, crdlimits.PluginName, webhookurls.PluginName, placement.PluginName, pushsecret.PluginName, projection.PluginName, apibinding.PluginName, workspacelimits.PluginName, clusteradmission.PluginName, kcpquota.PluginName, kcpserviceaccount.PluginName)...)
	// Upstream caches token authentication results by token alone and
	// validates in a context without the request's cluster; a result from
	// one cluster would then be accepted in another. Service-account tokens
	// are validated per request, in the request's cluster.
	up.Authentication.TokenSuccessCacheTTL = 0
	up.Authentication.TokenFailureCacheTTL = 0
	tg := satokens.New()
	up.Authentication.ServiceAccounts.OptionalTokenGetter = tg.TokenGetterFunc()
	*opts = Options{RootDir: ".kcp", DatastoreNotify: true, DatastoreMaxConnections: datastore.DefaultMaxConnections, ChangeHistoryRetention: 30 * 24 * time.Hour, RestoreWritesPerSecond: DefaultRestoreWritesPerSecond, AuditRetention: 30 * 24 * time.Hour,
		KineCompactInterval: 5 * time.Minute, KineCompactMinRetain: 1000, CRDHandlerIdle: 10 * time.Minute, TenantMaxInflight: max(4, 2*runtime.GOMAXPROCS(0)), TenantMaxStartingWatches: max(4, 2*runtime.GOMAXPROCS(0)), MemoryLimitRatio: 0.9, Upstream: up, TokenGetter: tg, CRDLimits: &crdLimits, Outbound: policy,
		SyncTargetHeartbeatTimeout: 20 * time.Second, PlacementEvictionDelay: 5 * time.Second, PlacementEvictionRate: 0.1, PodStreams: podstreams.DefaultLimits,
		GCDiscoveryPeriod: 30 * time.Second, Shards: membership}
	return opts
}

// DefaultRestoreWritesPerSecond is --restore-writes-per-second's default:
// the fastest pace at which another tenant's median latency stayed at its
// idle value on both dialects on 2 cores (docs/performance.md, "Pacing a
// restore"): at 1000 a second PostgreSQL's median rose by half. A restore
// of 10,000 objects takes 20 s at this pace, of 100,000 under 4 minutes.
const DefaultRestoreWritesPerSecond = 500

// maxObjectCountPeriod is the longest --object-count-period: upstream's
// priority and fairness takes a resource's count as stale after 3 minutes,
// and the counts are taken at up to 20% past the period (jitter).
const maxObjectCountPeriod = 2 * time.Minute

// hiddenUpstreamGroups are flag groups kcp owns itself: storage is the
// embedded kine, selected with --datastore.
var hiddenUpstreamGroups = sets.New("etcd")

// AddFlags registers kcp's flags and the upstream groups operators need.
func (o *Options) AddFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("kcp")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir,
		"Directory for kcp's state: admin.kubeconfig, the generated CA, serving and admin certificates, service-account key and the SQLite file kcp.db. Existing files are reused.")
	fs.StringVar(&o.Datastore, "datastore", o.Datastore,
		"Where objects are stored. Empty: <root-dir>/kcp.db. sqlite:///path/to/file.db for another SQLite file, or postgres://user:password@host:5432/dbname (the database is created if missing).")
	fs.BoolVar(&o.DatastoreNotify, "datastore-notify", o.DatastoreNotify,
		"PostgreSQL only: tell the other replicas of this one's writes (NOTIFY) and wake up when they write (LISTEN), instead of each polling every second. Turn off only to measure the difference: the other replicas then see this one's writes only when they poll.")
	fs.IntVar(&o.DatastoreMaxConnections, "datastore-max-connections", o.DatastoreMaxConnections,
		"PostgreSQL only: the most connections this server opens to the database (three quarters for kine's reads and writes, the rest for its own queries; one more listens for other replicas' writes). They stay open while idle for up to 2 minutes, so that a busy server does not connect per request. Keep the sum over all replicas, plus other clients, below the database's max_connections (PostgreSQL's default is 100). Requests beyond it wait for a connection. 0: no bound.")
	fs.BoolVar(&o.StoreDefaults, "store-defaults", o.StoreDefaults,
		"Store every namespace's service account \"default\" and config map \"kube-root-ca.crt\" and every workspace's ClusterRoleBinding \"workspace-owner\" as rows (as kcp did before: two writes per namespace, one per workspace) instead of serving them until they are changed. Clients see the same objects either way; rows already stored stay. Every replica must use the same setting. See docs/architecture.md.")
	fs.BoolVar(&o.ChangeHistory, "change-history", o.ChangeHistory,
		"Record every create, update and delete of every object, per logical cluster, in the SQL table kcp_changes (kept past kine's compaction; see docs/sql-auditing.md). Applies to the whole datastore, for all replicas.")
	fs.DurationVar(&o.ChangeHistoryRetention, "change-history-retention", o.ChangeHistoryRetention,
		"How long the change history keeps a change; 0 keeps everything.")
	fs.Float64Var(&o.RestoreWritesPerSecond, "restore-writes-per-second", o.RestoreWritesPerSecond,
		"The most objects per second that workspace restores (WorkspaceRestore, kcp restore) write, all restores of this server together. Every restored object is a write and a watch event that the server's caches and controllers handle, so an unbounded restore (about 2,000 objects a second on SQLite on 2 cores) slows every other tenant while it runs; a lower bound keeps their latency and makes a restore take longer (10,000 objects at 500 a second: 20 s). 0: no bound, the restore writes as fast as the datastore takes its background writes.")
	fs.BoolVar(&o.AuditToDatastore, "audit-to-datastore", o.AuditToDatastore,
		"Write audit events (user, groups, verb, resource, logical cluster, namespace, name, response code, time) into the SQL table audit_events, in batches. Which requests are recorded is set by --audit-policy-file.")
	fs.DurationVar(&o.AuditRetention, "audit-retention", o.AuditRetention, "How long audit_events keeps an event; 0 keeps everything.")
	fs.DurationVar(&o.KineCompactInterval, "kine-compact-interval", o.KineCompactInterval,
		"How often kine deletes old revisions and tombstones from its table (watchers further behind must re-list).")
	fs.Int64Var(&o.KineCompactMinRetain, "kine-compact-min-retain", o.KineCompactMinRetain,
		"How many of the newest revisions kine's compaction always keeps.")
	fs.DurationVar(&o.CRDHandlerIdle, "crd-handler-idle", o.CRDHandlerIdle,
		"Drop the serving state (storage, validators, converters) of a logical cluster's custom resources after this long without a request; it is rebuilt on the next one. 0 keeps it.")
	fs.IntVar(&o.TenantMaxInflight, "tenant-max-inflight", o.TenantMaxInflight,
		"How many requests (watches apart) one workspace other than root may have executing at once; the others wait, in the order API priority and fairness lets them through, so that one tenant flooding the server shares the CPUs with the others instead of taking them. Requests of system:masters are not counted, and a request waiting for an admission or conversion webhook gives its slot back meanwhile. 0 sets no bound. The default is two per CPU, at least 4.")
	fs.IntVar(&o.TenantMaxStartingWatches, "tenant-max-starting-watches", o.TenantMaxStartingWatches,
		"How many watches one workspace other than root may have starting at once (sending their initial objects, while they hold seats of API priority and fairness); its other watches wait, without holding seats, until one of them has started. A tenant opening hundreds of watches of thousands of objects at once then holds a bounded part of the seats, and other tenants' requests go on. Watches of system:masters are not counted. 0 sets no bound. The default is two per CPU, at least 4.")
	fs.Float64Var(&o.MemoryLimitRatio, "memory-limit-ratio", o.MemoryLimitRatio,
		"Set the Go runtime's soft memory limit to this share of the memory limit of the container (cgroup v1 or v2) kcp runs in, so that the garbage collector works harder near the limit instead of the process being killed while a start fills its caches. GOMEMLIMIT, when set, wins; without a container memory limit nothing is set. 0 turns it off.")
	fs.IntVar(&o.CRDLimits.MaxEnumValues, "max-crd-enum-values", o.CRDLimits.MaxEnumValues,
		"Refuse a CustomResourceDefinition whose schemas list more enum values than this (all versions together); a huge enum costs memory in every replica. 0: no limit.")
	fs.Int64Var(&o.CRDLimits.MaxSchemaBytesPerCluster, "max-crd-schema-bytes-per-workspace", o.CRDLimits.MaxSchemaBytesPerCluster,
		"Refuse a CustomResourceDefinition when the schemas of all CustomResourceDefinitions of its logical cluster would exceed this many bytes of JSON, so that no tenant can cost the others their memory. 0: no limit.")
	fs.Int64Var(&o.WorkspaceLimits.Objects, "workspace-max-objects", o.WorkspaceLimits.Objects,
		"Refuse creates in a workspace (all but root) that stores this many live objects already (its defaults included: an empty workspace holds about 8), so that no tenant can fill the database. A Workspace's spec.limits.objects, set in its parent, overrides it. 0: no limit.")
	fs.Int64Var(&o.WorkspaceLimits.Bytes, "workspace-max-bytes", o.WorkspaceLimits.Bytes,
		"Refuse creates that would take a workspace (all but root) over this many bytes of stored JSON (as the SQL view kcp_cluster_footprint counts them). A Workspace's spec.limits.bytes, set in its parent, overrides it. 0: no limit.")
	fs.DurationVar(&o.SyncTargetHeartbeatTimeout, "synctarget-heartbeat-timeout", o.SyncTargetHeartbeatTimeout,
		"A SyncTarget (physical cluster) becomes NotReady when its syncer has not reported for this long; a SyncTarget's spec.heartbeatTimeout overrides it.")
	fs.DurationVar(&o.PlacementEvictionDelay, "placement-eviction-delay", o.PlacementEvictionDelay,
		"How long a namespace stays assigned to a NotReady SyncTarget before its workloads move to another Ready target its Placement selects (failover takes about --synctarget-heartbeat-timeout plus this). It is the tolerationSeconds of the taint workload.kcp.io/not-ready for a Placement that does not tolerate it itself.")
	fs.Float64Var(&o.PlacementEvictionRate, "placement-eviction-rate", o.PlacementEvictionRate,
		"How many SyncTargets per second may start handing their namespaces to other targets because they are NotReady or carry a NoExecute taint (like kube-controller-manager's --node-eviction-rate): when several targets fail at once, one starts and the others wait their turn (status condition EvictionRateLimited), so that a flapping network does not move a whole location at once. All namespaces of a target move together. 0: no bound.")
	fs.DurationVar(&o.GCDiscoveryPeriod, "garbage-collector-discovery-period", o.GCDiscoveryPeriod,
		"How often the garbage collector rediscovers the resources it watches: a custom resource of a new CRD is collected from the next discovery on, and one no longer served by any workspace stops being watched two discoveries after its last CRD went.")
	fs.IntVar(&o.PodStreams.PerWorkspace, "pod-streams-per-workspace", o.PodStreams.PerWorkspace,
		"The most logs, exec, attach and port-forward streams one workspace may have open at once through kcp (more are refused with 429). 0: no cap.")
	fs.IntVar(&o.PodStreams.PerTarget, "pod-streams-per-synctarget", o.PodStreams.PerTarget,
		"The most logs, exec, attach and port-forward streams open at once to one SyncTarget (through its syncer's tunnel, or kcp's own connection in push mode), across all workspaces (more are refused with 429). 0: no cap.")
	fs.DurationVar(&o.PodStreams.Idle, "pod-stream-idle-timeout", o.PodStreams.Idle,
		"Close a logs, exec, attach or port-forward stream through kcp when nothing was sent either way for this long (like the kubelet's --streaming-connection-idle-timeout). 0: never.")
	fs.BoolVar(&o.PushMode, "push-mode", o.PushMode,
		"Run the syncer of every SyncTarget whose spec.push names a Secret with its physical cluster's kubeconfig inside kcp (push mode). Off by default: a tenant's kubeconfig makes the server dial an address of the tenant's choosing; connections obey --webhook-allowed-networks, and only inline credentials are accepted (docs/multicluster.md).")
	fs.BoolVar(&o.Upstream.Etcd.EnableWatchCache, "watch-cache", o.Upstream.Etcd.EnableWatchCache,
		"Serve lists, watches and reads at a resource version from one in-memory cache per built-in resource across all logical clusters (upstream's watch cache, keyed by cluster). Costs memory for every stored object; false reads everything from the datastore. Custom resources are never cached.")
	fs.DurationVar(&o.Upstream.Etcd.StorageConfig.CountMetricPollPeriod, "object-count-period", o.Upstream.Etcd.StorageConfig.CountMetricPollPeriod,
		"How often each resource's number of objects is taken again, for the apiserver_resource_objects metric and for priority and fairness, which charges a list of all clusters by it. Built-in resources are counted in the watch cache (no datastore query; with --watch-cache=false, a COUNT over every cluster's keys); custom resources are not counted. At most "+maxObjectCountPeriod.String()+" (older counts make priority and fairness charge every such list the most); 0 stops counting, and such lists are then charged the least. kube-apiserver's --etcd-count-metric-poll-period.")
	fs.IPNetSliceVar(&o.WebhookAllowedNetworks, "webhook-allowed-networks", o.WebhookAllowedNetworks,
		"Networks (CIDRs, comma-separated) that webhook URLs of tenants' CRDs may reach although they are refused by default: loopback, link-local (cloud metadata), private and other special-purpose ranges. Public addresses are always allowed. Example: 10.20.0.0/16.")
	sh := fss.FlagSet("shards")
	sh.StringVar(&o.ShardsFile, "shards-file", o.ShardsFile,
		"Make this server one shard of several that serve one workspace tree behind kcp front-proxy, each on a database of its own. The file (YAML) lists every shard: shards: [{name: root, url: https://host:port}, ...] and externalURL, the front proxy's address that Workspaces report in status.URL. Every shard and front proxy reads the same file and shares one CA and service-account key (copy ca.crt, ca.key and service-account.key into each --root-dir before the first start); the shard named root holds the root workspace. See docs/operations.md, \"Shards\".")
	sh.StringVar(&o.ShardName, "shard-name", o.ShardName, "This server's name in --shards-file.")
	sh.StringVar(&o.WorkspaceShard, "workspace-shard", o.WorkspaceShard,
		"The shard a new workspace goes to when its Workspace does not name one (spec.shard). Empty: as --workspace-shard-policy chooses.")
	sh.StringVar(&o.WorkspaceShardPolicy, "workspace-shard-policy", o.WorkspaceShardPolicy,
		"Where a new workspace goes when neither its Workspace (spec.shard) nor --workspace-shard names a shard: parent (the shard of its parent, which needs no call between shards) or least-full (the shard that holds the fewest workspaces among those that answer within 2 s; each shard is asked at most every 10 s, and the choices in between count themselves). Decided by the parent's shard, so set it on every shard.")
	var up cliflag.NamedFlagSets
	o.Upstream.AddFlags(&up)
	for _, name := range up.Order {
		if hiddenUpstreamGroups.Has(name) {
			continue
		}
		target := fss.FlagSet(name)
		up.FlagSets[name].VisitAll(func(f *pflag.Flag) { target.AddFlag(f) })
	}
}

// CompletedOptions are options with the datastore parsed and the root
// directory's credentials in place.
type CompletedOptions struct {
	// SyncTargetHeartbeatTimeout, PushMode, PlacementEvictionDelay: see Options.
	SyncTargetHeartbeatTimeout time.Duration
	PushMode                   bool
	PlacementEvictionDelay     time.Duration
	PlacementEvictionRate      float64
	PodStreams                 podstreams.Limits
	GCDiscoveryPeriod          time.Duration
	WorkspaceLimits            tenancy.Limits
	RootDir                    string
	Datastore                  *datastore.Datastore
	DatastoreNotify            bool
	DatastoreMaxConnections    int
	StoreDefaults              bool
	ChangeHistory              bool
	Retention                  time.Duration
	// RestoreWritesPerSecond: see Options.
	RestoreWritesPerSecond float64
	// kine's compaction (interval, newest revisions kept)
	CompactInterval  time.Duration
	CompactMinRetain int64
	AuditToDB        bool
	AuditRetention   time.Duration
	CRDHandlerIdle   time.Duration
	// TenantMaxInflight: see Options.
	TenantMaxInflight int
	// TenantMaxStartingWatches: see Options.
	TenantMaxStartingWatches int
	// MemoryLimitRatio: see Options.
	MemoryLimitRatio float64
	PKI              pki.Files
	Upstream         cpoptions.CompletedOptions
	// ServerURL is how local clients reach the server.
	ServerURL   string
	TokenGetter *satokens.Getter
	// Outbound decides what tenants' webhook URLs may reach.
	Outbound *outbound.Policy
	// Shards is this server's place among several (Sharded() false: one
	// server).
	Shards *shards.Membership
	// WorkspaceURL is where clients reach workspaces: the front proxy's
	// externalURL of a sharded installation, else ServerURL.
	WorkspaceURL string
}

// Complete parses the datastore, creates missing credentials and completes
// the upstream options with them.
func (o *Options) Complete(ctx context.Context) (*CompletedOptions, error) {
	if !(o.MemoryLimitRatio >= 0 && o.MemoryLimitRatio <= 1) { // NaN too
		return nil, fmt.Errorf("--memory-limit-ratio must be between 0 (off) and 1, not %v", o.MemoryLimitRatio)
	}
	if o.TenantMaxInflight < 0 {
		return nil, fmt.Errorf("--tenant-max-inflight must be 0 (no bound) or more, not %d", o.TenantMaxInflight)
	}
	if o.TenantMaxStartingWatches < 0 {
		return nil, fmt.Errorf("--tenant-max-starting-watches must be 0 (no bound) or more, not %d", o.TenantMaxStartingWatches)
	}
	if p := o.Upstream.Etcd.StorageConfig.CountMetricPollPeriod; p < 0 || p > maxObjectCountPeriod {
		return nil, fmt.Errorf("--object-count-period must be between 0 (no counts) and %s, not %s: priority and fairness takes a count older than 3 minutes as stale and charges every list of all clusters the most", maxObjectCountPeriod, p)
	}
	root, err := filepath.Abs(o.RootDir)
	if err != nil {
		return nil, err
	}
	ds, err := datastore.Parse(o.Datastore, root)
	if err != nil {
		return nil, err
	}
	files := pki.Files{Dir: root}
	up := o.Upstream
	host := up.SecureServing.BindAddress.String()
	if up.SecureServing.BindAddress.IsUnspecified() {
		host = "127.0.0.1"
	}
	serverURL := fmt.Sprintf("https://%s", net.JoinHostPort(host, fmt.Sprint(up.SecureServing.BindPort)))
	hosts := []string{"127.0.0.1", "localhost", "::1"}
	if !up.SecureServing.BindAddress.IsUnspecified() && !up.SecureServing.BindAddress.IsLoopback() {
		hosts = append(hosts, host)
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		hosts = append(hosts, hn)
	}
	if err := pki.Ensure(files, hosts, serverURL); err != nil {
		return nil, err
	}

	up.SecureServing.ServerCert.CertDirectory = root
	if up.SecureServing.ServerCert.CertKey.CertFile == "" {
		up.SecureServing.ServerCert.CertKey.CertFile = files.ServingCert()
		up.SecureServing.ServerCert.CertKey.KeyFile = files.ServingKey()
	}
	if up.Authentication.ClientCert != nil && up.Authentication.ClientCert.ClientCA == "" {
		up.Authentication.ClientCert.ClientCA = files.CACert()
	}
	if sa := up.Authentication.ServiceAccounts; sa != nil {
		if len(sa.KeyFiles) == 0 {
			sa.KeyFiles = []string{files.ServiceAccountKey()}
		}
		if len(sa.Issuers) == 0 {
			sa.Issuers = []string{"https://kcp.default.svc"}
		}
		// The discovery document names where the keys are; upstream would
		// derive an address from the advertise address, which kcp may not
		// listen on.
		if sa.JWKSURI == "" {
			sa.JWKSURI = serverURL + "/openid/v1/jwks"
		}
	}
	up.Etcd.StorageConfig.Transport.ServerList = []string{"unix://" + embeddedkine.SocketPath(root)}
	if up.ServiceAccountSigningKeyFile == "" {
		up.ServiceAccountSigningKeyFile = files.ServiceAccountKey()
	}
	workspaceURL, err := o.completeShards(files, serverURL)
	if err != nil {
		return nil, err
	}
	completed, err := up.Complete(ctx, nil, nil)
	if err != nil {
		return nil, err
	}
	return &CompletedOptions{RootDir: root, Datastore: ds, DatastoreNotify: o.DatastoreNotify, DatastoreMaxConnections: o.DatastoreMaxConnections, StoreDefaults: o.StoreDefaults, ChangeHistory: o.ChangeHistory, Retention: o.ChangeHistoryRetention, RestoreWritesPerSecond: o.RestoreWritesPerSecond, AuditToDB: o.AuditToDatastore, CompactInterval: o.KineCompactInterval, CompactMinRetain: o.KineCompactMinRetain, AuditRetention: o.AuditRetention, CRDHandlerIdle: o.CRDHandlerIdle, TenantMaxInflight: o.TenantMaxInflight, TenantMaxStartingWatches: o.TenantMaxStartingWatches, MemoryLimitRatio: o.MemoryLimitRatio, PKI: files, Upstream: completed, ServerURL: serverURL, TokenGetter: o.TokenGetter, Outbound: o.outboundPolicy(),
		SyncTargetHeartbeatTimeout: o.SyncTargetHeartbeatTimeout, PushMode: o.PushMode, PlacementEvictionDelay: o.PlacementEvictionDelay, PlacementEvictionRate: o.PlacementEvictionRate, PodStreams: o.PodStreams, GCDiscoveryPeriod: o.GCDiscoveryPeriod,
		WorkspaceLimits: o.WorkspaceLimits, Shards: o.Shards, WorkspaceURL: workspaceURL}, nil
}

// Validate reports every invalid option.
func (c *CompletedOptions) Validate() []error {
	errs := c.Upstream.Validate()
	if c.AuditToDB && c.Upstream.Audit.PolicyFile == "" {
		errs = append(errs, fmt.Errorf("--audit-to-datastore needs --audit-policy-file to say which requests to record"))
	}
	if c.WorkspaceLimits.Objects < 0 || c.WorkspaceLimits.Bytes < 0 {
		errs = append(errs, fmt.Errorf("--workspace-max-objects and --workspace-max-bytes must be 0 (no limit) or positive"))
	}
	if n := c.DatastoreMaxConnections; n < 0 || (n > 0 && n < 4) {
		errs = append(errs, fmt.Errorf("--datastore-max-connections must be 0 (no bound) or at least 4 (kine's poller, a write and the server's own queries each need one), got %d", n))
	}
	if c.SyncTargetHeartbeatTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--synctarget-heartbeat-timeout must be positive, got %s", c.SyncTargetHeartbeatTimeout))
	}
	if c.PodStreams.PerWorkspace < 0 || c.PodStreams.PerTarget < 0 || c.PodStreams.Idle < 0 {
		errs = append(errs, fmt.Errorf("--pod-streams-per-workspace, --pod-streams-per-synctarget and --pod-stream-idle-timeout must not be negative"))
	}
	if c.PlacementEvictionRate < 0 {
		errs = append(errs, fmt.Errorf("--placement-eviction-rate must not be negative (0: no bound), got %v", c.PlacementEvictionRate))
	}
	if !(c.RestoreWritesPerSecond >= 0) || math.IsInf(c.RestoreWritesPerSecond, 1) {
		errs = append(errs, fmt.Errorf("--restore-writes-per-second must be 0 (no bound) or a positive number, got %v", c.RestoreWritesPerSecond))
	}
	if c.GCDiscoveryPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--garbage-collector-discovery-period must be at least 1s, got %s", c.GCDiscoveryPeriod))
	}
	if c.PlacementEvictionDelay < 0 {
		errs = append(errs, fmt.Errorf("--placement-eviction-delay must not be negative, got %s", c.PlacementEvictionDelay))
	}
	return errs
}

func (o *Options) outboundPolicy() *outbound.Policy {
	if o.Outbound == nil {
		o.Outbound = &outbound.Policy{}
	}
	o.Outbound.Allowed = nil
	for i := range o.WebhookAllowedNetworks {
		o.Outbound.Allowed = append(o.Outbound.Allowed, &o.WebhookAllowedNetworks[i])
	}
	return o.Outbound
}

// completeShards loads the shards file, issues this shard's credentials for
// calls to the others and makes the server believe the front proxy's
// request headers (from its certificate only). It returns the URL
// workspaces are reached at.
func (o *Options) completeShards(files pki.Files, serverURL string) (string, error) {
	if o.ShardsFile == "" {
		if o.ShardName != "" || o.WorkspaceShard != "" || (o.WorkspaceShardPolicy != "" && o.WorkspaceShardPolicy != shards.PolicyParent) {
			return "", fmt.Errorf("--shard-name, --workspace-shard and --workspace-shard-policy need --shards-file")
		}
		return serverURL, nil
	}
	cfg, err := shards.Load(o.ShardsFile)
	if err != nil {
		return "", err
	}
	if o.ShardName == "" {
		return "", fmt.Errorf("--shards-file needs --shard-name, this server's name in it (one of: %s)", strings.Join(cfg.Names(), ", "))
	}
	if _, ok := cfg.Get(o.ShardName); !ok {
		return "", fmt.Errorf("--shard-name %q is not in %s (it has: %s)", o.ShardName, o.ShardsFile, strings.Join(cfg.Names(), ", "))
	}
	if o.WorkspaceShardPolicy != "" && !slices.Contains(shards.Policies, o.WorkspaceShardPolicy) {
		return "", fmt.Errorf("--workspace-shard-policy %q is not one of: %s", o.WorkspaceShardPolicy, strings.Join(shards.Policies, ", "))
	}
	if o.WorkspaceShard != "" && o.WorkspaceShardPolicy == shards.PolicyLeastFull {
		return "", fmt.Errorf("--workspace-shard %s names the shard of every new workspace, --workspace-shard-policy least-full chooses one: give one of them", o.WorkspaceShard)
	}
	if _, ok := cfg.Get(o.WorkspaceShard); o.WorkspaceShard != "" && !ok {
		return "", fmt.Errorf("--workspace-shard %q is not in %s (it has: %s)", o.WorkspaceShard, o.ShardsFile, strings.Join(cfg.Names(), ", "))
	}
	if err := shards.EnsurePeerCert(files, o.ShardName); err != nil {
		return "", err
	}
	*o.Shards = shards.Membership{Self: o.ShardName, Config: cfg, Files: files}
	if rh := o.Upstream.Authentication.RequestHeader; rh != nil && rh.ClientCAFile == "" {
		rh.ClientCAFile = files.CACert()
		rh.AllowedNames = []string{shards.ProxyUser}
		rh.UsernameHeaders = []string{shards.UserHeader}
		rh.GroupHeaders = []string{shards.GroupHeader}
		rh.ExtraHeaderPrefixes = []string{shards.ExtraHeaderPrefix}
	}
	if cfg.ExternalURL != "" {
		return strings.TrimSuffix(cfg.ExternalURL, "/"), nil
	}
	return serverURL, nil
}
