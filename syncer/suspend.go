package syncer

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
)

// whileSuspended handles an object of a namespace whose Placement suspends
// this target (spec.suspend or spec.suspendTargets): nothing downstream is
// created, updated or deleted, not even for an upstream deletion, whose
// finalizer for this target stays until the namespace is resumed; the
// downstream copy's status still goes up, so what runs stays visible. The
// namespace's policy annotation changes when it is resumed, which queues
// every object of the namespace again: what changed meanwhile (a new spec,
// a deletion) is then done.
func (s *Syncer) whileSuspended(ctx context.Context, it item, up *unstructured.Unstructured, upExists bool, down *unstructured.Unstructured, pol *workload.NamespacePolicy) error {
	if !upExists || down == nil || up.GetDeletionTimestamp() != nil {
		return nil
	}
	if ok, _ := s.runsHere(it.gvr, up, pol); !ok {
		return nil
	}
	return s.statusUp(ctx, it, up, down, pol)
}
