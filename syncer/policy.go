package syncer

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kcpsql/kcp/schema/workload"
)

// shareStatusUp writes this target's status of a Deployment or DaemonSet that several
// targets run into its own annotation (a merge patch of the status
// subresource that sets that one annotation, which the syncer view
// allows); kcp combines them.
func (s *Syncer) shareStatusUp(ctx context.Context, it item, up *unstructured.Unstructured, st map[string]interface{}, pol *workload.NamespacePolicy, down *unstructured.Unstructured) error {
	written, observed := copyGenerations(down)
	replicas, found, _ := unstructured.NestedInt64(up.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	share := workload.ShareStatus{Mode: pol.Mode, Share: pol.Share(int32(replicas), s.key), Status: st, Written: written, Observed: observed}
	if pol.Overflow() && it.gvr == deploymentsGVR {
		// Only Deployments are divided by capacity.
		share.Share, share.Group = pol.ShareOf(up, s.key), pol.Targets[s.key].Group
		if room, ok := s.capacityFor(ctx, DownstreamNamespace(it.cluster, it.namespace), up); ok {
			share.Capacity = &room
		} else if prev, err := workload.ParseShareStatus(up.GetAnnotations()[workload.StatusAnnotationPrefix+s.key]); err == nil {
			// Not known yet (the caches are filling): the last report
			// stands.
			share.Capacity = prev.Capacity
		}
		// The division as it stands with this report.
		if err := overflowSummary(up, s.key, pol, &share); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(share)
	if err != nil {
		return err
	}
	name := workload.StatusAnnotationPrefix + s.key
	if up.GetAnnotations()[name] == string(raw) {
		return nil
	}
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"annotations": map[string]string{name: string(raw)}}})
	c, err := s.upClient(it.cluster)
	if err != nil {
		return err
	}
	// Through the status subresource: a Deployment's generation counts
	// changes of its annotations made through the object itself, and a
	// status write changes none of the spec.
	_, err = c.Resource(it.gvr).Namespace(it.namespace).Patch(ctx, it.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	return ignoreNotFound(err)
}

// applyPolicy gives a downstream copy this target's share of a
// Deployment's replicas (Divide) and applies the overrides of this target:
// a strategic merge patch for kinds client-go knows (containers merge by
// name), a JSON merge patch for others.
func (s *Syncer) applyPolicy(gvr schema.GroupVersionResource, up, obj *unstructured.Unstructured, pol *workload.NamespacePolicy) error {
	if pol == nil {
		return nil
	}
	if gvr == deploymentsGVR && pol.Mode == workload.ModeDivide {
		// From the upstream object: an overflow division reads the
		// targets' capacities from its annotations.
		if err := unstructured.SetNestedField(obj.Object, int64(pol.ShareOf(up, s.key)), "spec", "replicas"); err != nil {
			return err
		}
	}
	if gvr == hpasGVR {
		if err := s.hpaBounds(obj, pol); err != nil {
			return err
		}
	}
	for _, o := range pol.Targets[s.key].Overrides {
		if o.Resource != "" && o.Resource != workload.ResourceName(gvr.Group, gvr.Resource) {
			continue
		}
		// Admission refuses such overrides; checked again here, since the
		// syncer finds and maps back its copies by what they would change.
		if err := workload.CheckOverridePatch(o.Patch.Raw); err != nil {
			return fmt.Errorf("override for %s: %v", pol.Targets[s.key].Name, err)
		}
		if err := patchObject(obj, o.Patch.Raw); err != nil {
			return fmt.Errorf("override for %s: %v", pol.Targets[s.key].Name, err)
		}
	}
	return nil
}

func patchObject(obj *unstructured.Unstructured, patch []byte) error {
	if len(patch) == 0 {
		return nil
	}
	current, err := json.Marshal(obj.Object)
	if err != nil {
		return err
	}
	var out []byte
	if typed, err := scheme.Scheme.New(obj.GroupVersionKind()); err == nil {
		out, err = strategicpatch.StrategicMergePatch(current, patch, typed)
		if err != nil {
			return err
		}
	} else if out, err = jsonpatch.MergePatch(current, patch); err != nil {
		return err
	}
	// Decoded as unstructured decodes (integers stay int64).
	patched := &unstructured.Unstructured{}
	if err := patched.UnmarshalJSON(out); err != nil {
		return err
	}
	obj.Object = patched.Object
	return nil
}

// overflowSummary sets share's Division and Spilled from the division of up
// with share (this target's new report) in place of its annotation.
func overflowSummary(up *unstructured.Unstructured, key string, pol *workload.NamespacePolicy, share *workload.ShareStatus) error {
	raw, err := json.Marshal(share)
	if err != nil {
		return err
	}
	with := up.DeepCopy()
	ann := with.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[workload.StatusAnnotationPrefix+key] = string(raw)
	with.SetAnnotations(ann)
	groups := pol.Overflowed(with)
	share.Division, share.Spilled = workload.OverflowMessage(groups), workload.Spilled(groups)
	return nil
}
