package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Objects the syncer did not create. The syncer finds its copies by its
// sync-target label; an object of the same name downstream without that
// label was made by someone else (an operator, an application that ran
// there before the team moved onto kcp, the syncer of another SyncTarget
// on the same physical cluster). Server-side apply with force would take
// it over silently, so before writing an object it has no copy of, the
// syncer looks: with the Placement's conflictResolution Refuse (the
// default) it leaves such an object alone and reports the conflict (a
// DownstreamConflict condition on the upstream object where its kind has
// conditions, and the SyncTarget's status.conflicts); with Adopt it takes
// the object over (labels it as its own and applies kcp's spec). Another
// SyncTarget's copy is never adopted. The same holds for the downstream
// namespace itself.

// conflictRecheck is how often a refused object is looked at again (the
// syncer watches only its own objects: the foreign one going away is seen
// this way).
const conflictRecheck = 30 * time.Second

// errNamespaceConflict: the downstream namespace exists and is not kcp's.
type errNamespaceConflict struct{ reason string }

func (e errNamespaceConflict) Error() string { return e.reason }

// foreign says why a downstream object is not this syncer's to write
// ("" when it is: its own label, or adoptable under Adopt).
func (s *Syncer) foreign(obj *unstructured.Unstructured, what string, adopt bool) string {
	owner, labelled := obj.GetLabels()[TargetLabel]
	switch {
	case owner == s.key:
		return ""
	case labelled:
		return fmt.Sprintf("%s exists on the physical cluster and belongs to another SyncTarget's syncer (%s=%s): never adopted", what, TargetLabel, owner)
	case adopt:
		return ""
	}
	return fmt.Sprintf("%s exists on the physical cluster and was not created by kcp: not overwritten (the Placement's conflictResolution is Refuse; Adopt takes it over)", what)
}

// checkConflict looks at the physical cluster for an object the syncer
// is about to create (it has no copy of it): "" when there is none, or it
// is the syncer's own, or it is to be adopted.
func (s *Syncer) checkConflict(ctx context.Context, it item, dr dynamic.ResourceInterface, dns string, pol *workload.NamespacePolicy) (string, error) {
	obj, err := dr.Get(ctx, it.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	why := s.foreign(obj, fmt.Sprintf("%s %s/%s", resourceName(it.gvr), dns, it.name), pol.Adopts())
	if why == "" && obj.GetLabels()[TargetLabel] != s.key {
		klog.InfoS("adopting a downstream object kcp did not create", "resource", it.gvr.Resource, "namespace", dns, "name", it.name, "cluster", it.cluster)
	}
	return why, nil
}

func resourceName(gvr schema.GroupVersionResource) string {
	return workload.ResourceName(gvr.Group, gvr.Resource)
}

// refuse records a conflict and tells the upstream object, where its
// kind has conditions, with a DownstreamConflict condition.
func (s *Syncer) refuse(ctx context.Context, it item, up *unstructured.Unstructured, why string) error {
	s.mu.Lock()
	if s.conflicts == nil {
		s.conflicts = map[item]string{}
	}
	s.conflicts[it] = why
	s.mu.Unlock()
	klog.V(2).InfoS("not writing an object kcp did not create", "item", it, "why", why)
	if !hasConditions[it.gvr] {
		return nil
	}
	conds, _, _ := unstructured.NestedSlice(up.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == workload.ConditionDownstreamConflict && m["status"] == "True" && m["message"] == why {
			return nil
		}
	}
	var kept []interface{}
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); !ok || m["type"] != workload.ConditionDownstreamConflict {
			kept = append(kept, c)
		}
	}
	kept = append(kept, map[string]interface{}{"type": workload.ConditionDownstreamConflict, "status": "True",
		"reason": workload.ReasonNotCreatedByKCP, "message": why, "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)})
	patch, err := json.Marshal(map[string]interface{}{"status": map[string]interface{}{"conditions": kept}})
	if err != nil {
		return err
	}
	c, err := s.upClient(it.cluster)
	if err != nil {
		return err
	}
	_, err = c.Resource(it.gvr).Namespace(it.namespace).Patch(ctx, it.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	return ignoreNotFound(err)
}

// resolved forgets an object's conflict.
func (s *Syncer) resolved(it item) {
	s.mu.Lock()
	delete(s.conflicts, it)
	s.mu.Unlock()
}

// hasConditions are the synced kinds whose status has a list of
// conditions (type, status, reason, message, lastTransitionTime).
var hasConditions = map[schema.GroupVersionResource]bool{
	deploymentsGVR: true, daemonsetsGVR: true,
	{Group: "apps", Version: "v1", Resource: "statefulsets"}:                    true,
	{Group: "batch", Version: "v1", Resource: "jobs"}:                           true,
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}:          true,
	{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}: true,
	{Version: "v1", Resource: "persistentvolumeclaims"}:                         true,
	servicesGVR: true,
}

// ConflictStatus is what the heartbeat reports of the refused objects
// (nil when there are none).
func (s *Syncer) ConflictStatus() *workload.ConflictStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conflicts) == 0 {
		return nil
	}
	out := &workload.ConflictStatus{Count: len(s.conflicts)}
	for it, why := range s.conflicts {
		out.Objects = append(out.Objects, workload.SyncConflict{Workspace: string(it.cluster), Namespace: it.namespace,
			Resource: resourceName(it.gvr), Name: it.name, Reason: why})
	}
	sort.Slice(out.Objects, func(i, j int) bool {
		a, b := out.Objects[i], out.Objects[j]
		if a.Workspace != b.Workspace {
			return a.Workspace < b.Workspace
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Name < b.Name
	})
	if len(out.Objects) > workload.MaxConflictsListed {
		out.Objects = out.Objects[:workload.MaxConflictsListed]
	}
	return out
}

// AdoptedAnnotation marks a downstream namespace the syncer adopted: when
// the workspace's namespace leaves the target it is released (kcp's label
// and annotations removed), never deleted, since what else runs in it is
// not the workspace's.
const AdoptedAnnotation = "workload.kcp.io/adopted"

// releaseNamespace gives an adopted namespace back: kcp's label and
// annotations go, the namespace and what is left in it stay.
func (s *Syncer) releaseNamespace(ctx context.Context, name string) error {
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"labels":      map[string]interface{}{TargetLabel: nil},
		"annotations": map[string]interface{}{UpstreamClusterAnnotation: nil, UpstreamNamespaceAnnotation: nil, AdoptedAnnotation: nil}}})
	_, err := s.down.Resource(namespacesGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err == nil {
		klog.InfoS("released an adopted downstream namespace", "namespace", name)
	}
	return ignoreNotFound(err)
}

// adoptNamespace takes over a downstream namespace kcp did not create
// (Adopt): its labels and annotations become those of a namespace the
// syncer made; its other labels stay.
func (s *Syncer) adoptNamespace(ctx context.Context, name string, cluster logicalcluster.Name, upstreamNS string, labels map[string]string) error {
	patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"labels": labels,
		"annotations": map[string]string{UpstreamClusterAnnotation: string(cluster), UpstreamNamespaceAnnotation: upstreamNS, AdoptedAnnotation: "true"}}})
	if err != nil {
		return err
	}
	_, err = s.down.Resource(namespacesGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err == nil {
		klog.InfoS("adopted a downstream namespace kcp did not create", "namespace", name, "cluster", cluster, "upstream", upstreamNS)
	}
	return err
}
