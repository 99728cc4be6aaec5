package syncer

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/sharedmaps"
)

// The syncer's caches keep what it reads of an object and nothing else
// (docs/multicluster.md, "The syncer's memory"): every object a physical
// cluster or kcp serves carries managed fields, often more bytes than its
// spec, which the syncer never reads (it applies with its own field
// manager and compares digests of what it writes), and objects written
// with kubectl apply carry their whole last configuration once more in an
// annotation that downstreamCopy drops.

// lastAppliedAnnotation is kubectl apply's copy of the last configuration.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// trimObject is the cache transform of the syncer's informers of whole
// objects (upstream: what it syncs; downstream: its copies and what it
// projects): the object without managed fields and without kubectl's
// last-applied configuration. Handlers and the cache see the same trimmed
// object.
func trimObject(obj interface{}) (interface{}, error) {
	m, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	meta, ok := m.Object["metadata"].(map[string]interface{})
	if !ok {
		return obj, nil
	}
	delete(meta, "managedFields")
	if ann, ok := meta["annotations"].(map[string]interface{}); ok {
		if _, has := ann[lastAppliedAnnotation]; has {
			delete(ann, lastAppliedAnnotation)
			if len(ann) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	return m, nil
}

// trimProjection is the cache transform of the syncer's own projections
// upstream: the projector reads only which projections exist and their
// identity (uid, resourceVersion, deletionTimestamp, the downstream UID
// they were made from, their cluster), never their content, which is
// rebuilt from the downstream object on every look.
func trimProjection(obj interface{}) (interface{}, error) {
	m, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &stored{ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
		ResourceVersion: m.GetResourceVersion(), DeletionTimestamp: m.GetDeletionTimestamp()}}
	out.APIVersion, out.Kind = m.GetAPIVersion(), m.GetKind()
	ann := m.GetAnnotations()
	if uid, ok := ann[workload.DownstreamUIDAnnotation]; ok {
		out.Annotations = map[string]string{logicalcluster.Annotation: ann[logicalcluster.Annotation], workload.DownstreamUIDAnnotation: uid}
	} else if cl, ok := ann[logicalcluster.Annotation]; ok {
		out.Annotations = sharedmaps.Of(map[string]string{logicalcluster.Annotation: cl})
	}
	return out, nil
}

// trimSecret is the cache transform of the API access Secrets: their
// metadata without managed fields (the syncer reads their annotations:
// when to renew, for which ServiceAccount and kcp address), not the token
// and CA they hold.
func trimSecret(obj interface{}) (interface{}, error) {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	out := &corev1.Secret{TypeMeta: sec.TypeMeta, ObjectMeta: *sec.ObjectMeta.DeepCopy(), Type: sec.Type}
	out.ManagedFields = nil
	return out, nil
}
