package syncer

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Labels of upstream's PodSecurity admission that the syncer sets on every
// downstream namespace, from its SyncTarget's spec.podSecurity: the
// physical cluster itself then refuses tenant pods that break the level,
// whatever creates them (a Deployment's ReplicaSet, an operator).
const (
	PodSecurityEnforceLabel        = "pod-security.kubernetes.io/enforce"
	PodSecurityEnforceVersionLabel = "pod-security.kubernetes.io/enforce-version"
)

// errLevelUnknown: the SyncTarget has not been read yet; namespaces wait
// for its level rather than be created with a guess.
var errLevelUnknown = fmt.Errorf("the SyncTarget's pod security level is not known yet")

// SetPodSecurity gives the syncer its SyncTarget's spec (the heartbeat
// reads it); a new level relabels every downstream namespace.
func (s *Syncer) SetPodSecurity(target *workload.SyncTarget) {
	level := target.Spec.PodSecurityLevel()
	prev := s.podSecurity.Swap(&level)
	if prev != nil && *prev == level {
		return
	}
	klog.InfoS("pod security level of the SyncTarget", "syncTarget", s.target, "level", level)
	if prev == nil {
		return // nothing was created before the level was known
	}
	for _, o := range s.dstream[namespacesGVR].List() {
		ns := object(o)
		a := ns.GetAnnotations()
		if cl, err := logicalcluster.Parse(a[UpstreamClusterAnnotation]); err == nil {
			s.queue.Add(item{gvr: namespacesGVR, cluster: cl, name: a[UpstreamNamespaceAnnotation]})
		}
	}
}

// podSecurityLabels are the labels a downstream namespace must carry.
func (s *Syncer) podSecurityLabels() (map[string]string, error) {
	level := s.podSecurity.Load()
	if level == nil {
		return nil, errLevelUnknown
	}
	return map[string]string{PodSecurityEnforceLabel: *level, PodSecurityEnforceVersionLabel: "latest"}, nil
}

// relabelNamespace sets the labels of an existing downstream namespace
// (pod security, the workspace's namespace labels) when they are not what
// they should be, and removes the stale ones.
func (s *Syncer) relabelNamespace(ctx context.Context, ns *unstructured.Unstructured, want map[string]string, stale []string) error {
	have := ns.GetLabels()
	patchLabels := map[string]interface{}{}
	for k, v := range want {
		if have[k] != v {
			patchLabels[k] = v
		}
	}
	for _, k := range stale {
		patchLabels[k] = nil
	}
	if len(patchLabels) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"labels": patchLabels}})
	_, err := s.down.Resource(namespacesGVR).Patch(ctx, ns.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err == nil {
		klog.V(2).InfoS("downstream namespace relabelled", "namespace", ns.GetName(), "labels", patchLabels)
	}
	return ignoreNotFound(err)
}
