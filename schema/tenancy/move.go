package tenancy

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// WorkspaceMovesResource: a WorkspaceMove, created in a workspace's parent,
// moves that workspace to another shard online
// (crds/tenancy.kcp.io_workspacemoves.yaml, docs/operations.md).
var WorkspaceMovesResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "workspacemoves"}

// Phases of a WorkspaceMove.
const (
	MovePending   = "Pending"
	MoveRunning   = "Running"
	MoveSucceeded = "Succeeded"
	MoveFailed    = "Failed"
)

const (
	// MoveAnnotation on a LogicalCluster freezes its logical cluster while
	// a move to another shard runs: "<shard>/<WorkspaceMove name>" (the
	// WorkspaceMove is in the parent). Set and removed by kcp only.
	MoveAnnotation = "tenancy.kcp.io/move"
	// MoveClaimAnnotation on a LogicalCluster names the move that copies
	// it ("<shard>/<WorkspaceMove name>", as MoveAnnotation) from its first
	// copy on, before the freeze: one move at a time copies a workspace, so
	// that undoing one never deletes another's copy. Set and removed by
	// kcp only.
	MoveClaimAnnotation = "tenancy.kcp.io/move-claim"
	// MovedToAnnotation on a LogicalCluster marks the copy a move left
	// behind: its value is the shard that holds the workspace now. A shard
	// serves nothing of such a cluster (503, watches end), and the front
	// proxy routes to the copy without it.
	MovedToAnnotation = "tenancy.kcp.io/moved-to"
	// MovedFromAnnotation on a moved-in LogicalCluster records where it came
	// from: "<shard>@<revision>", the source's revision when it stopped
	// serving the cluster.
	MovedFromAnnotation = "tenancy.kcp.io/moved-from"
)

// MoveValue is the MoveAnnotation for a move named name to shard.
func MoveValue(shard, name string) string { return shard + "/" + name }

// ParseMove splits a MoveAnnotation into the target shard and the move.
func ParseMove(v string) (shard, name string) {
	shard, name, _ = strings.Cut(v, "/")
	return shard, name
}
