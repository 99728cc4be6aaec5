package tenancy

import "k8s.io/apimachinery/pkg/runtime/schema"

// WorkspaceRestoresResource: a WorkspaceRestore, created in a workspace's
// parent, brings that workspace back to an earlier state from the change
// history (crds/tenancy.kcp.io_workspacerestores.yaml, docs/operations.md).
var WorkspaceRestoresResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "workspacerestores"}

// Phases of a WorkspaceRestore.
const (
	RestorePending   = "Pending"
	RestoreRunning   = "Running"
	RestoreSucceeded = "Succeeded"
	RestoreFailed    = "Failed"
)

// WorkspaceSnapshotsResource: a WorkspaceSnapshot, created in a
// workspace's parent, keeps snapshots of that workspace in the datastore
// (crds/tenancy.kcp.io_workspacesnapshots.yaml).
var WorkspaceSnapshotsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "workspacesnapshots"}

// SnapshotsFinalizer holds a WorkspaceSnapshot until its stored snapshots
// are deleted.
const SnapshotsFinalizer = "tenancy.kcp.io/snapshots"
