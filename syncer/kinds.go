package syncer

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

var (
	rolebindingsGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	hpasGVR         = schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}
	statefulsetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	secretsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// runsHere reports whether this target runs an upstream object at all: a
// kind that runs on one target only (workload.SpreadOne) runs on the
// namespace's first target, and a RoleBinding to a ClusterRole that is
// not safe on a shared physical cluster runs nowhere (it grants in the
// workspace only).
func (s *Syncer) runsHere(gvr schema.GroupVersionResource, up *unstructured.Unstructured, pol *workload.NamespacePolicy) (bool, string) {
	if !pol.Runs(gvr.GroupResource(), s.key) {
		return false, "runs on target " + pol.One()
	}
	if gvr == secretsGVR && strings.HasPrefix(up.GetName(), APIAccessSecretPrefix) {
		return false, "the name prefix " + APIAccessSecretPrefix + " is the syncer's own (workspace tokens of the pods)"
	}
	if gvr == rolebindingsGVR {
		kind, _, _ := unstructured.NestedString(up.Object, "roleRef", "kind")
		name, _, _ := unstructured.NestedString(up.Object, "roleRef", "name")
		if ok, why := workload.RoleBindingSynced(kind, name); !ok {
			return false, why
		}
	}
	return true, ""
}

// notHere makes sure an object that does not run on this target has no
// copy here (it ran here before the namespace's targets changed).
func (s *Syncer) notHere(ctx context.Context, it item, down *unstructured.Unstructured, why string) error {
	s.forget(it)
	if down == nil {
		return nil
	}
	klog.V(2).InfoS("deleting a downstream copy that does not run on this target", "resource", it.gvr.Resource, "cluster", it.cluster,
		"namespace", it.namespace, "name", it.name, "reason", why)
	return ignoreNotFound(s.down.Resource(it.gvr).Namespace(down.GetNamespace()).Delete(ctx, it.name, metav1.DeleteOptions{}))
}

// rewriteRoleBinding maps a RoleBinding's subjects to the physical
// cluster: ServiceAccounts of the workspace's namespaces become those of
// their downstream namespaces (a hash of workspace and namespace, so they
// never name another tenant's); Users and Groups, which are identities of
// kcp, not of the physical cluster, are left out.
func rewriteRoleBinding(obj *unstructured.Unstructured, cluster logicalcluster.Name, upstreamNS string) error {
	subjects, _, err := unstructured.NestedSlice(obj.Object, "subjects")
	if err != nil {
		return fmt.Errorf("subjects: %v", err)
	}
	out := make([]interface{}, 0, len(subjects))
	for _, sub := range subjects {
		m, ok := sub.(map[string]interface{})
		if !ok || m["kind"] != "ServiceAccount" {
			continue
		}
		ns, _ := m["namespace"].(string)
		if ns == "" {
			ns = upstreamNS
		}
		m["namespace"] = DownstreamNamespace(cluster, ns)
		out = append(out, m)
	}
	if len(out) == 0 {
		unstructured.RemoveNestedField(obj.Object, "subjects")
		return nil
	}
	return unstructured.SetNestedSlice(obj.Object, out, "subjects")
}

// hpaBounds gives an autoscaler this target's share of its bounds
// (workload.NamespacePolicy.BoundsShare).
func (s *Syncer) hpaBounds(obj *unstructured.Unstructured, pol *workload.NamespacePolicy) error {
	lo, found, _ := unstructured.NestedInt64(obj.Object, "spec", "minReplicas")
	if !found {
		lo = 1
	}
	hi, _, _ := unstructured.NestedInt64(obj.Object, "spec", "maxReplicas")
	l, h := pol.BoundsShare(int32(lo), int32(hi), s.key)
	if err := unstructured.SetNestedField(obj.Object, int64(l), "spec", "minReplicas"); err != nil {
		return err
	}
	return unstructured.SetNestedField(obj.Object, int64(h), "spec", "maxReplicas")
}

// jobWithoutSelector leaves out what kcp's Job strategy generated from
// the Job's uid in kcp (the selector, and the uid labels of the pod
// template it selects): the physical cluster refuses a generated selector
// of another uid and generates its own from its copy's uid.
func jobWithoutSelector(obj *unstructured.Unstructured) {
	if manual, _, _ := unstructured.NestedBool(obj.Object, "spec", "manualSelector"); manual {
		return
	}
	unstructured.RemoveNestedField(obj.Object, "spec", "selector")
	for _, l := range []string{"controller-uid", "batch.kubernetes.io/controller-uid"} {
		unstructured.RemoveNestedField(obj.Object, "spec", "template", "metadata", "labels", l)
	}
}

// statusForUpstream maps what a downstream status names on the physical
// cluster back to the workspace: a CronJob's active Jobs are named in the
// CronJob's own namespace, as the user would name them (they run
// downstream; kcp has no Job objects for them), without the physical
// cluster's uids.
func statusForUpstream(gvr schema.GroupVersionResource, st map[string]interface{}, upstreamNS string) {
	if gvr.GroupResource() != (schema.GroupResource{Group: "batch", Resource: "cronjobs"}) {
		return
	}
	active, ok := st["active"].([]interface{})
	if !ok {
		return
	}
	for _, a := range active {
		if m, ok := a.(map[string]interface{}); ok {
			m["namespace"] = upstreamNS
			delete(m, "uid")
			delete(m, "resourceVersion")
		}
	}
}

// podForDownstream leaves a Pod's priority and node to the physical
// cluster: its priority admission computes the priority from the class
// name (and refuses a value it did not compute), and its scheduler picks
// the node.
func podForDownstream(obj *unstructured.Unstructured) {
	unstructured.RemoveNestedField(obj.Object, "spec", "priority")
	unstructured.RemoveNestedField(obj.Object, "spec", "nodeName")
}

// scaledByAutoscaler reports whether an autoscaler of the workspace
// targets this Deployment or StatefulSet (the autoscaler's copy on this
// cluster then owns its replicas).
func (s *Syncer) scaledByAutoscaler(it item) bool {
	hpas, ok := s.upstream[hpasGVR]
	if !ok || (it.gvr != deploymentsGVR && it.gvr != statefulsetsGVR) {
		return false
	}
	objs, _ := hpas.ByIndex(clusterinformer.ByClusterNamespace, string(it.cluster)+"|"+it.namespace)
	for _, o := range objs {
		if kind, name := scaleTarget(object(o)); name == it.name && scaleKind(it.gvr) == kind {
			return true
		}
	}
	return false
}

func scaleTarget(hpa *unstructured.Unstructured) (kind, name string) {
	kind, _, _ = unstructured.NestedString(hpa.Object, "spec", "scaleTargetRef", "kind")
	name, _, _ = unstructured.NestedString(hpa.Object, "spec", "scaleTargetRef", "name")
	return kind, name
}

func scaleKind(gvr schema.GroupVersionResource) string {
	if gvr == statefulsetsGVR {
		return "StatefulSet"
	}
	return "Deployment"
}

// leaveReplicas keeps a downstream copy's replicas as the autoscaler
// there set them: the syncer applies what is there (so that it neither
// reverts the autoscaler nor, by dropping a field it owned, resets it).
func leaveReplicas(desired, down *unstructured.Unstructured) {
	if down == nil {
		return
	}
	if r, found, _ := unstructured.NestedInt64(down.Object, "spec", "replicas"); found {
		_ = unstructured.SetNestedField(desired.Object, r, "spec", "replicas")
	}
}

// enqueueScaleTarget looks again at what an autoscaler scales when the
// autoscaler comes, changes or goes.
func (s *Syncer) enqueueScaleTarget(it item, objs ...*unstructured.Unstructured) {
	for _, o := range objs {
		if o == nil {
			continue
		}
		switch kind, name := scaleTarget(o); kind {
		case "Deployment":
			s.queue.Add(item{gvr: deploymentsGVR, cluster: it.cluster, namespace: it.namespace, name: name})
		case "StatefulSet":
			s.queue.Add(item{gvr: statefulsetsGVR, cluster: it.cluster, namespace: it.namespace, name: name})
		}
	}
}

// namespaceNameLabel is the label every namespace carries with its own name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// rewriteNetworkPolicy makes a NetworkPolicy's namespace selectors mean,
// on the shared physical cluster, what they mean in the workspace
// (namespacelabels.go): namespaces named by kubernetes.io/metadata.name
// (matchLabels, or In/NotIn) are the workspace's namespaces of those names
// as they run downstream; selectors on other labels select by the
// workspace's namespace labels as the syncer carries them down; and every
// selector is narrowed to the workspace's own namespaces. A selector that
// would select kube-system as written (by name, or {}) gets a second peer
// naming the physical cluster's kube-system, so the usual DNS egress rule
// keeps working.
func rewriteNetworkPolicy(obj *unstructured.Unstructured, cluster logicalcluster.Name) {
	mapName := func(v interface{}) interface{} {
		if s, ok := v.(string); ok && s != "kube-system" {
			return DownstreamNamespace(cluster, s)
		}
		return v
	}
	for _, dir := range [][2]string{{"ingress", "from"}, {"egress", "to"}} {
		rules, ok, _ := unstructured.NestedSlice(obj.Object, "spec", dir[0])
		if !ok {
			continue
		}
		for _, r := range rules {
			rm, ok := r.(map[string]interface{})
			if !ok {
				continue
			}
			peers, _ := rm[dir[1]].([]interface{})
			var added []interface{}
			for _, p := range peers {
				pm, ok := p.(map[string]interface{})
				if !ok {
					continue
				}
				sel, ok := pm["namespaceSelector"].(map[string]interface{})
				if !ok {
					continue
				}
				original, _ := runtimeDeepCopy(sel).(map[string]interface{})
				if ml, ok := sel["matchLabels"].(map[string]interface{}); ok {
					if v, ok := ml[namespaceNameLabel]; ok {
						ml[namespaceNameLabel] = mapName(v)
					}
				}
				exprs, _ := sel["matchExpressions"].([]interface{})
				for _, e := range exprs {
					em, ok := e.(map[string]interface{})
					if !ok || em["key"] != namespaceNameLabel {
						continue
					}
					vals, _ := em["values"].([]interface{})
					for i := range vals {
						vals[i] = mapName(vals[i])
					}
				}
				if scopeNamespaceSelector(sel, original, cluster) {
					kubeSystem := map[string]interface{}{"namespaceSelector": map[string]interface{}{
						"matchLabels": map[string]interface{}{namespaceNameLabel: "kube-system"}}}
					if ps, ok := pm["podSelector"]; ok {
						kubeSystem["podSelector"] = runtimeDeepCopy(ps)
					}
					added = append(added, kubeSystem)
				}
			}
			if len(added) > 0 {
				rm[dir[1]] = append(peers, added...)
			}
		}
		_ = unstructured.SetNestedSlice(obj.Object, rules, "spec", dir[0])
	}
}
