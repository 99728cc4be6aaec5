package syncer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// templateAsWritten gives a projected ReplicaSet the pod template its
// Deployment in kcp has, and a projected ControllerRevision the one its
// StatefulSet or DaemonSet has: without what the syncer adds to the pods
// it runs so that they reach their workspace (redirectPods: the API access
// volume and its mounts, KUBERNETES_SERVICE_HOST and _PORT, and
// automountServiceAccountToken), where the workload's own template does
// not have them. Clients find a Deployment's current ReplicaSet by its
// template (helm install --wait, kubectl rollout history and undo), and an
// undo (which writes a ReplicaSet's template, or a ControllerRevision's
// data, back into the workload) must not write the syncer's additions
// into the workload.
func (p *projector) templateAsWritten(out *unstructured.Unstructured, cluster logicalcluster.Name, ns string) {
	// Where the template is: a ReplicaSet's spec.template, a
	// ControllerRevision's data.spec.template (a patch of its owner).
	path := []string{"spec", "template", "spec"}
	owners := map[string]schema.GroupVersionResource{"Deployment": deploymentsGVR}
	if out.GetKind() == "ControllerRevision" {
		path = []string{"data", "spec", "template", "spec"}
		owners = map[string]schema.GroupVersionResource{"StatefulSet": statefulsetsGVR, "DaemonSet": daemonsetsGVR}
	}
	spec, ok, _ := unstructured.NestedMap(out.Object, path...)
	if !ok {
		return
	}
	var own map[string]interface{}
	for _, ref := range out.GetOwnerReferences() {
		gvr, known := owners[ref.Kind]
		if !known || ref.Controller == nil || !*ref.Controller {
			continue
		}
		if idx := p.s.upstream[gvr]; idx != nil {
			if o, exists, _ := idx.GetByKey(clusterinformer.Key(cluster, ns, ref.Name)); exists {
				own, _, _ = unstructured.NestedMap(object(o).Object, "spec", "template", "spec")
			}
		}
	}
	withoutAPIAccess(spec, own)
	_ = unstructured.SetNestedMap(out.Object, spec, path...)
}

// withoutAPIAccess takes the syncer's API access additions out of a pod
// spec, keeping what own (the spec as the tenant wrote it) has.
func withoutAPIAccess(spec, own map[string]interface{}) {
	if v, has := own["automountServiceAccountToken"]; has {
		spec["automountServiceAccountToken"] = v
	} else {
		delete(spec, "automountServiceAccountToken")
	}
	setOrDelete(spec, "volumes", withoutNamed(spec["volumes"], own["volumes"], "name", apiAccessVolume))
	for _, field := range []string{"initContainers", "containers"} {
		cs, _ := spec[field].([]interface{})
		for _, c := range cs {
			m, ok := c.(map[string]interface{})
			if !ok {
				continue
			}
			var mine map[string]interface{}
			owned, _ := own[field].([]interface{})
			for _, oc := range owned {
				if om, ok := oc.(map[string]interface{}); ok && om["name"] == m["name"] {
					mine = om
				}
			}
			setOrDelete(m, "volumeMounts", withoutNamed(m["volumeMounts"], mine["volumeMounts"], "name", apiAccessVolume))
			setOrDelete(m, "env", withoutNamed(m["env"], mine["env"], "name", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"))
		}
	}
}

func setOrDelete(m map[string]interface{}, key string, list []interface{}) {
	if len(list) == 0 {
		delete(m, key)
	} else {
		m[key] = list
	}
}

// withoutNamed is list without the entries whose key is one of names,
// unless reference (the list as the tenant wrote it) has an entry of that
// name too.
func withoutNamed(list, reference interface{}, key string, names ...string) []interface{} {
	l, _ := list.([]interface{})
	ref, _ := reference.([]interface{})
	written := map[interface{}]bool{}
	for _, r := range ref {
		if m, ok := r.(map[string]interface{}); ok {
			written[m[key]] = true
		}
	}
	var out []interface{}
	for _, e := range l {
		m, ok := e.(map[string]interface{})
		drop := false
		for _, n := range names {
			if ok && m[key] == n && !written[n] {
				drop = true
			}
		}
		if !drop {
			out = append(out, e)
		}
	}
	return out
}
