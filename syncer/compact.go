package syncer

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/sharedmaps"
)

// stored is how the syncer's caches of whole objects hold one: its JSON
// (trimmed, trimObject) and the identity its keys, indexes and handlers
// read (name, namespace, uid, resourceVersion, and for objects read from
// kcp their cluster, in a map shared by all objects of the cluster). A decoded object (unstructured maps of
// interfaces) takes five to ten times the bytes of its JSON; the syncer
// reads a cached object once per reconcile, so it decodes it then
// (object). Every caller gets a fresh copy: nothing can change the cache.
type stored struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	raw []byte
	// phase is a Pod's status.phase (outofcapacity.go looks at the
	// pending ones only); serviceAccount is the ServiceAccount the pods of
	// a workload run as (mountedServiceAccounts reads it every few
	// seconds for every workload).
	phase, serviceAccount string
	// refs are the objects it names as "<kind>/<name>\n" each: its owners
	// and an Event's involvedObject (ownerAppeared looks at every object
	// of a namespace when an owner appears).
	refs string
}

// DeepCopyObject makes stored a runtime.Object (the informers' queues and
// stores treat it as one). raw is never changed, so it is shared.
func (s *stored) DeepCopyObject() runtime.Object {
	out := &stored{TypeMeta: s.TypeMeta, raw: s.raw, phase: s.phase, serviceAccount: s.serviceAccount, refs: s.refs}
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// compact is the cache transform of the syncer's informers of whole
// objects: the object trimmed (trimObject) and held as its JSON.
func compact(obj interface{}) (interface{}, error) { return compactFor("")(obj) }

// compactFor is compact for a cache of resource (its workloads' service
// account is kept apart).
func compactFor(resource string) cache.TransformFunc {
	path := podSpecPath(resource)
	return func(obj interface{}) (interface{}, error) {
		out, err := compactObject(obj)
		if st, ok := out.(*stored); ok && err == nil && path != nil {
			st.serviceAccount = serviceAccountOf(obj.(*unstructured.Unstructured), path)
		}
		return out, err
	}
}

// serviceAccountOf is the ServiceAccount of a workload's pods (at path).
func serviceAccountOf(m *unstructured.Unstructured, path []string) string {
	spec, _, _ := unstructured.NestedMap(m.Object, path...)
	sa, _ := spec["serviceAccountName"].(string)
	if sa == "" {
		sa, _ = spec["serviceAccount"].(string)
	}
	if sa == "" {
		sa = "default"
	}
	return sa
}

func compactObject(obj interface{}) (interface{}, error) {
	m, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	if _, err := trimObject(m); err != nil {
		return nil, err
	}
	buf, err := m.MarshalJSON()
	if err != nil {
		return nil, err
	}
	// The encoder's buffer has grown by doubling (up to twice the bytes
	// of the JSON): only the JSON is kept.
	raw := make([]byte, len(buf))
	copy(raw, buf)
	out := &stored{raw: raw, ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
		ResourceVersion: m.GetResourceVersion()}}
	out.APIVersion, out.Kind = m.GetAPIVersion(), m.GetKind()
	if out.Kind == "Pod" {
		out.phase, _, _ = unstructured.NestedString(m.Object, "status", "phase")
	}
	out.refs = refsOf(m)
	if cl, ok := m.GetAnnotations()[logicalcluster.Annotation]; ok {
		out.Annotations = sharedmaps.Of(map[string]string{logicalcluster.Annotation: cl})
	}
	return out, nil
}

// object is a cached object (or a handler's: a DeletedFinalStateUnknown
// is unwrapped) decoded, or nil if it is none.
func object(o interface{}) *unstructured.Unstructured {
	switch t := o.(type) {
	case cache.DeletedFinalStateUnknown:
		return object(t.Obj)
	case *unstructured.Unstructured:
		return t
	case *stored:
		if t.raw == nil {
			return identity(t)
		}
		out := &unstructured.Unstructured{}
		if err := out.UnmarshalJSON(t.raw); err != nil {
			// The syncer encoded it itself: cannot happen.
			panic(fmt.Sprintf("decoding a cached %s %s/%s: %v", t.Kind, t.Namespace, t.Name, err))
		}
		return out
	}
	return nil
}

// objects decodes a list of cached objects.
func objects(os []interface{}) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(os))
	for _, o := range os {
		if m := object(o); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// identity is an object of which only the identity is cached
// (trimProjection), as an unstructured object.
func identity(t *stored) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]interface{}{}}
	out.SetAPIVersion(t.APIVersion)
	out.SetKind(t.Kind)
	out.SetName(t.Name)
	out.SetNamespace(t.Namespace)
	out.SetUID(t.UID)
	out.SetResourceVersion(t.ResourceVersion)
	out.SetDeletionTimestamp(t.DeletionTimestamp)
	if len(t.Annotations) > 0 {
		ann := make(map[string]string, len(t.Annotations))
		for k, v := range t.Annotations {
			ann[k] = v
		}
		out.SetAnnotations(ann)
	}
	return out
}

// identityOf is a handler's object's identity (name, namespace, cluster
// annotation), read without decoding a cached object.
func identityOf(o interface{}) (metav1.Object, bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	switch t := o.(type) {
	case *stored:
		return t, true
	case *unstructured.Unstructured:
		return t, true
	}
	return nil, false
}

// refsOf lists what an object names (stored.refs).
func refsOf(m *unstructured.Unstructured) string {
	var b strings.Builder
	for _, ref := range m.GetOwnerReferences() {
		b.WriteString(ref.Kind + "/" + ref.Name + "\n")
	}
	if m.GetKind() == "Event" {
		kind, _, _ := unstructured.NestedString(m.Object, "involvedObject", "kind")
		name, _, _ := unstructured.NestedString(m.Object, "involvedObject", "name")
		b.WriteString(kind + "/" + name + "\n")
	}
	return b.String()
}

// names reports whether a cached object names kind/name (refsOf).
func (s *stored) names(kind, name string) bool {
	return strings.Contains("\n"+s.refs, "\n"+kind+"/"+name+"\n")
}

// unwrapped is a handler's object without a DeletedFinalStateUnknown
// around it, not decoded.
func unwrapped(o interface{}) interface{} {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}
