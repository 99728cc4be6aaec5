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
)

var (
	WorkspacesResource      = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "workspaces"}
	LogicalClustersResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "logicalclusters"}
)

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
	// Type is a free-form label of the workspace's kind (for example
	// "organization" or "team"); kcp does not interpret it yet.
	Type string `json:"type,omitempty"`
	// Limits cap what the workspace's logical cluster may store; whoever
	// may edit the Workspace in its parent sets them (the tenant inside
	// cannot). Absent or zero: the server's defaults
	// (--workspace-max-objects, --workspace-max-bytes).
	Limits *Limits `json:"limits,omitempty"`
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
