package syncer

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/schema/workload"
)

// statusUp copies the downstream status to kcp (a merge patch of status
// only, with null for what disappeared). A Deployment's
// observedGeneration is kcp's generation once the physical cluster has
// observed the copy written from it, so kubectl rollout status means what
// it says.
func (s *Syncer) statusUp(ctx context.Context, it item, up, down *unstructured.Unstructured, pol *workload.NamespacePolicy) error {
	if it.gvr == servicesGVR {
		if err := s.allocationUp(ctx, it, up, down); err != nil {
			return err
		}
	}
	st, ok, _ := unstructured.NestedMap(down.Object, "status")
	if !ok {
		return nil
	}
	shared := pol != nil && len(pol.Targets) > 1
	summed := it.gvr == deploymentsGVR || it.gvr == daemonsetsGVR
	if shared && !summed && s.key != firstKey(pol) {
		// Several targets run this object: the first one reports its
		// status (Deployments and DaemonSets are summed by kcp instead).
		return nil
	}
	st = runtimeDeepCopy(st).(map[string]interface{})
	statusForUpstream(it.gvr, st, it.namespace)
	upStatus, _, _ := unstructured.NestedMap(up.Object, "status")
	if _, has := st["observedGeneration"]; has {
		observed, _, _ := unstructured.NestedInt64(down.Object, "status", "observedGeneration")
		from := down.GetAnnotations()[UpstreamGenerationAnnotation]
		if observed >= down.GetGeneration() && from == fmt.Sprint(up.GetGeneration()) {
			st["observedGeneration"] = up.GetGeneration()
		} else if prev, ok := upStatus["observedGeneration"]; ok {
			st["observedGeneration"] = prev
		} else {
			delete(st, "observedGeneration")
		}
	}
	if shared && summed {
		return s.shareStatusUp(ctx, it, up, st, pol, down)
	}
	if equality.Semantic.DeepEqual(jsonRound(st), jsonRound(upStatus)) {
		return nil
	}
	before, _ := json.Marshal(map[string]interface{}{"status": upStatus})
	after, _ := json.Marshal(map[string]interface{}{"status": st})
	patch, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil || string(patch) == "{}" {
		return err
	}
	c, err := s.upClient(it.cluster)
	if err != nil {
		return err
	}
	_, err = c.Resource(it.gvr).Namespace(it.namespace).Patch(ctx, it.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	return ignoreNotFound(err)
}

// jsonRound normalizes numbers (int64 against float64) for comparison.
func jsonRound(v interface{}) interface{} {
	b, _ := json.Marshal(v)
	var out interface{}
	_ = json.Unmarshal(b, &out)
	return out
}
