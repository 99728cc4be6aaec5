// Package conditions reads a condition of an object held as unstructured
// (status.conditions, as metav1.Condition lays it out).
package conditions

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Condition is one condition's fields that callers read.
type Condition struct {
	Status, Reason, Message string
}

// Find returns the condition of type t, and whether there is one.
func Find(u *unstructured.Unstructured, t string) (Condition, bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == t {
			var out Condition
			out.Status, _ = m["status"].(string)
			out.Reason, _ = m["reason"].(string)
			out.Message, _ = m["message"].(string)
			return out, true
		}
	}
	return Condition{}, false
}
