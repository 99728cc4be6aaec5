package workspace

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// storedWorkspaces remembers the new Workspaces (by child cluster, with
// the Workspace's UID) whose LogicalCluster, namespaces and default
// bindings the controller has stored and that only wait for the registry
// to route their cluster. Under load that wait lasts a few looks (20 ms
// apart), and every look used to store the objects again: four creates
// that found their key taken, each a turn of SQLite's single writer and
// two reads: about two wasted writes for every three real ones
// (docs/performance.md, "Creation: a workspace's objects stored once,
// SQLite's writes without goroutines").
//
// An entry lives from the first look that finds the registry behind until
// the Workspace is Ready, is being deleted, or is gone, or the wait has
// lasted over ten seconds (from then on every look, a second apart, stores
// the objects again, in case what was stored is gone); a Workspace of the
// same name with another UID is not the one remembered. The memory is this
// replica's own: a replica that did not store the objects stores them (the
// writes are idempotent), as before.
type storedWorkspaces struct {
	m sync.Map // logicalcluster.Name -> types.UID
}

func (s *storedWorkspaces) remember(child logicalcluster.Name, uid types.UID) {
	s.m.Store(child, uid)
}

func (s *storedWorkspaces) has(child logicalcluster.Name, uid types.UID) bool {
	v, ok := s.m.Load(child)
	return ok && v.(types.UID) == uid
}

func (s *storedWorkspaces) forget(child logicalcluster.Name) {
	s.m.Delete(child)
}
