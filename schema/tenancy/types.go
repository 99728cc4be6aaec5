// Package tenancy holds the tenancy.kcp.io/v1alpha1 API: Workspace, which a
// user creates in a parent logical cluster to get a child logical cluster,
// and LogicalCluster, the object named "cluster" whose existence makes a
// logical cluster exist. Both are served from CRDs that kcp installs in root
// and shares with every logical cluster (crds/).
package tenancy

import (
	"embed"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API.
const (
	Group   = "tenancy.kcp.io"
	Version = "v1alpha1"

	// LogicalClusterName is the name of the one LogicalCluster in each cluster.
	LogicalClusterName = "cluster"
	// WorkspaceFinalizer holds a Workspace until its logical cluster is gone.
	WorkspaceFinalizer = "tenancy.kcp.io/workspace"
	// OwnerAnnotation records, on a Workspace, who created it (JSON of
	// username and groups). Written by admission, never trusted from clients.
	OwnerAnnotation = "tenancy.kcp.io/owner"
	// TypeAnnotation records, on a Workspace with a type, the workspace
	// whose WorkspaceType it is and the default APIBindings admitted at
	// creation (JSON of ResolvedType). Written by admission, never trusted
	// from clients; the workspace controller creates those bindings.
	TypeAnnotation = "tenancy.kcp.io/type"
	// RestoreAnnotation on a LogicalCluster freezes its logical cluster
	// while a restore runs: its value is the name of the WorkspaceRestore,
	// in the parent, that set it. kcp's restore controller sets and removes
	// it (the LogicalCluster is kcp's alone: logicalclusterprotection).
	RestoreAnnotation = "tenancy.kcp.io/restore"
	// ConditionFrozen is the Workspace condition that is True, with the
	// reason as its message, while its spec.frozen is set (and the
	// workspace controller has copied it to the LogicalCluster).
	ConditionFrozen = "Frozen"
	// MaxFrozenReason is the longest spec.frozen.reason, in characters.
	MaxFrozenReason = 256
)

// ResolvedType is what a Workspace's TypeAnnotation holds.
type ResolvedType struct {
	// Path is the workspace that defines the type (the Workspace's parent
	// or one of its ancestors).
	Path     string              `json:"path"`
	Name     string              `json:"name"`
	Bindings []DefaultAPIBinding `json:"bindings,omitempty"`
}

var (
	WorkspacesResource      = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "workspaces"}
	LogicalClustersResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "logicalclusters"}
	WorkspaceTypesResource  = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "workspacetypes"}
)

// BuiltInTypes are the WorkspaceTypes kcp creates in root when they are
// missing (with no default bindings; an operator may add some). Being in
// root, they can be used everywhere.
var BuiltInTypes = map[string]string{
	"organization": "A workspace for an organization; it holds team workspaces.",
	"team":         "A workspace for one team or application.",
}

// WorkspaceType is cluster-scoped: a type defined in a workspace can be
// used by Workspaces created in it and in every workspace below it. The
// nearest definition of a name wins (the parent's over root's).
type WorkspaceType struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WorkspaceTypeSpec `json:"spec,omitempty"`
}

// WorkspaceTypeSpec says what a new workspace of the type starts with.
type WorkspaceTypeSpec struct {
	Description string `json:"description,omitempty"`
	// DefaultAPIBindings are the APIExports every new workspace of the
	// type binds before it is Ready. Creating such a workspace needs the
	// verb "bind" on each of them (as binding by hand would).
	DefaultAPIBindings []DefaultAPIBinding `json:"defaultAPIBindings,omitempty"`
}

// DefaultAPIBinding names an APIExport by workspace path and name.
type DefaultAPIBinding struct {
	Path   string `json:"path"`
	Export string `json:"export"`
}

// Phases of Workspace and LogicalCluster.
const (
	PhaseInitializing = "Initializing"
	PhaseReady        = "Ready"
	PhaseTerminating  = "Terminating"
)

// Workspace is cluster-scoped and lives in the parent logical cluster; its
// name is the last segment of the child's path.
type Workspace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WorkspaceSpec   `json:"spec,omitempty"`
	Status            WorkspaceStatus `json:"status,omitempty"`
}

// WorkspaceSpec is what the creator asks for.
type WorkspaceSpec struct {
	// Type names a WorkspaceType defined in the parent or an ancestor
	// (empty: no type). A new workspace binds the type's default APIs.
	Type string `json:"type,omitempty"`
	// Limits cap what the workspace's logical cluster may store; whoever
	// may edit the Workspace in its parent sets them (the tenant inside
	// cannot). Absent or zero: the server's defaults
	// (--workspace-max-objects, --workspace-max-bytes).
	Limits *Limits `json:"limits,omitempty"`
	// Frozen makes the workspace read-only: every write into its logical
	// cluster is refused with the reason, reads and watches go on, and
	// kcp's own controllers still finish what they do (deletions). Set
	// and removed by whoever may update the Workspace in its parent by
	// the parent's RBAC (owning the workspace is not enough). Absent: not
	// frozen.
	Frozen *Frozen `json:"frozen,omitempty"`
	// Shard is the shard (kcp start --shard-name) that holds the
	// workspace's logical cluster, in an installation of several
	// (--shards-file); set at creation, by the creator or by kcp's
	// policy (--workspace-shard), and never changed.
	Shard string `json:"shard,omitempty"`
}

// Frozen says why a workspace is read-only.
type Frozen struct {
	// Reason is shown in every refusal (1 to MaxFrozenReason characters,
	// not blank).
	Reason string `json:"reason"`
}

// Limits cap what a logical cluster stores: live objects and the bytes of
// their stored JSON (as the SQL view kcp_cluster_footprint counts them).
type Limits struct {
	Objects int64 `json:"objects,omitempty"`
	Bytes   int64 `json:"bytes,omitempty"`
}

// WorkspaceStatus reports the child logical cluster.
type WorkspaceStatus struct {
	Phase      string             `json:"phase,omitempty"`
	URL        string             `json:"URL,omitempty"`
	Cluster    string             `json:"cluster,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LogicalCluster marks a logical cluster as existing.
type LogicalCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              LogicalClusterSpec   `json:"spec,omitempty"`
	Status            LogicalClusterStatus `json:"status,omitempty"`
}

// LogicalClusterSpec names the Workspace that owns the cluster.
type LogicalClusterSpec struct {
	Owner        *Owner   `json:"owner,omitempty"`
	Initializers []string `json:"initializers,omitempty"`
	// Limits are the Workspace's spec.limits, copied by kcp.
	Limits *Limits `json:"limits,omitempty"`
	// Frozen is the Workspace's spec.frozen, copied by kcp.
	Frozen *Frozen `json:"frozen,omitempty"`
}

// Owner points at a Workspace in the parent cluster.
type Owner struct {
	Cluster string `json:"cluster"`
	Name    string `json:"name"`
	UID     string `json:"uid"`
}

// LogicalClusterStatus is the cluster's lifecycle.
type LogicalClusterStatus struct {
	Phase string `json:"phase,omitempty"`
	URL   string `json:"URL,omitempty"`
}

// CRDs are the definitions kcp installs in root.
//
//go:embed crds/*.yaml
var CRDs embed.FS
