package syncer

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
)

// heldByRollout reports whether a progressive rollout (Placement
// spec.rollout) keeps the new spec of a Deployment from this target's
// copy: the namespace runs on several targets, the copy here was written
// from an older generation, and kcp has not released this generation to
// this target (the Deployment's workload.kcp.io/rollout annotation). The
// copy then runs on as it is and only its status goes up, as while
// suspended (suspend.go). A target without a copy gets the newest spec at
// once: there is no old spec to keep there. When kcp releases the target,
// the annotation changes, which queues the Deployment again.
func (s *Syncer) heldByRollout(it item, up, down *unstructured.Unstructured, pol *workload.NamespacePolicy) bool {
	if it.gvr != deploymentsGVR || down == nil || pol == nil || pol.Rollout == nil || len(pol.Targets) < 2 || pol.Mode == workload.ModeDivide {
		return false
	}
	if down.GetAnnotations()[UpstreamGenerationAnnotation] == fmt.Sprint(up.GetGeneration()) {
		return false
	}
	return !workload.ParseRolloutState(up.GetAnnotations()).Released(up.GetGeneration(), s.key)
}

// copyGenerations are the upstream generation a downstream copy was
// written from, and the same once the physical cluster has observed the
// copy as written (0 until then; both 0 when unknown).
func copyGenerations(down *unstructured.Unstructured) (written, observed int64) {
	if down == nil {
		return 0, 0
	}
	_, _ = fmt.Sscan(down.GetAnnotations()[UpstreamGenerationAnnotation], &written)
	if g, ok, _ := unstructured.NestedInt64(down.Object, "status", "observedGeneration"); ok && g >= down.GetGeneration() {
		observed = written
	}
	return written, observed
}
