package clusterstore

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/rbac"
)

// internStrings makes the strings of a cache object that repeat across
// objects share one copy (see shareMaps for the maps): its namespace,
// finalizers, owner-reference and managed-field kinds, a namespace's phase
// and finalizers, a role binding's role reference and subject kinds.
// Decoded, each is an allocation of its own per object; names, UIDs and
// free-text values are usually unique and left as decoded, where interning
// would only add an entry to the table.
func internStrings(obj runtime.Object) {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			internMeta(m)
		}
	}
	switch o := obj.(type) {
	case *api.Namespace:
		o.Status.Phase = api.NamespacePhase(intern(string(o.Status.Phase)))
		for i, f := range o.Spec.Finalizers {
			o.Spec.Finalizers[i] = api.FinalizerName(intern(string(f)))
		}
	case *rbac.ClusterRoleBinding:
		internRoleRef(&o.RoleRef, o.Subjects)
	case *rbac.RoleBinding:
		internRoleRef(&o.RoleRef, o.Subjects)
	}
}

func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

func internMeta(m *metav1.ObjectMeta) {
	m.Namespace = intern(m.Namespace)
	for i, f := range m.Finalizers {
		m.Finalizers[i] = intern(f)
	}
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind = intern(r.APIVersion), intern(r.Kind)
	}
	for i := range m.ManagedFields {
		f := &m.ManagedFields[i]
		f.Manager, f.APIVersion, f.FieldsType, f.Subresource = intern(f.Manager), intern(f.APIVersion), intern(f.FieldsType), intern(f.Subresource)
		f.Operation = metav1.ManagedFieldsOperationType(intern(string(f.Operation)))
	}
}

func internRoleRef(r *rbac.RoleRef, subjects []rbac.Subject) {
	r.APIGroup, r.Kind, r.Name = intern(r.APIGroup), intern(r.Kind), intern(r.Name)
	for i := range subjects {
		s := &subjects[i]
		s.Kind, s.APIGroup, s.Namespace = intern(s.Kind), intern(s.APIGroup), intern(s.Namespace)
	}
}
