// Package record helps admission plugins that keep a kcp-written
// annotation on an object (a record only kcp may set): read what the
// object being replaced recorded, and write or clear the record.
package record

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
)

// Previous returns the annotation key of the object an update replaces.
func Previous(a admission.Attributes, key string) (string, error) {
	old, err := meta.Accessor(a.GetOldObject())
	if err != nil {
		return "", err
	}
	return old.GetAnnotations()[key], nil
}

// Set writes value as the annotation key of obj, or removes the
// annotation when value is empty.
func Set(obj metav1.Object, key, value string) {
	ann := obj.GetAnnotations()
	if value == "" {
		if _, ok := ann[key]; ok {
			delete(ann, key)
			obj.SetAnnotations(ann)
		}
		return
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	obj.SetAnnotations(ann)
}
