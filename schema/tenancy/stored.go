package tenancy

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/storage/storedjson"
)

// Stored is what kcp's own caches read of a stored Workspace or
// LogicalCluster when they list them straight from the datastore; the
// decoder skips the rest (managed fields are most of the bytes).
type Stored struct {
	Metadata struct {
		Name              string                  `json:"name"`
		UID               types.UID               `json:"uid"`
		Annotations       map[string]string       `json:"annotations"`
		DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
		Finalizers        []string                `json:"finalizers"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		Limits Limits `json:"limits"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// DecodeStored reads the Stored fields of the kind stored at key. It steps
// over the rest of the value without decoding it (storedjson): at start-up
// every Workspace and LogicalCluster is read this way.
func DecodeStored(kind, key string, value []byte) (*Stored, error) {
	var s Stored
	var err error
	// field decodes one member's value into dst, keeping the first error.
	field := func(name string, raw []byte, dst any) {
		if err == nil {
			if e := json.Unmarshal(raw, dst); e != nil {
				err = fmt.Errorf("%s: %w", name, e)
			}
		}
	}
	// str reads a string member; null leaves it empty.
	str := func(name string, raw []byte, dst *string) {
		if v, ok := storedjson.String(raw); ok {
			*dst = v
		} else if !storedjson.IsNull(raw) {
			field(name, raw, dst) // the error encoding/json gives
		}
	}
	walk := func(name string, raw []byte, fn func(k, v []byte)) {
		if err != nil || string(raw) == "null" {
			return
		}
		if e := storedjson.Members(raw, func(k, v []byte) bool { fn(k, v); return err == nil }); e != nil && err == nil {
			err = fmt.Errorf("%s: %w", name, e)
		}
	}
	e := storedjson.Members(value, func(k, v []byte) bool {
		switch string(k) {
		case "metadata":
			walk("metadata", v, func(k, v []byte) {
				m := &s.Metadata
				switch string(k) {
				case "name":
					str("metadata.name", v, &m.Name)
				case "uid":
					str("metadata.uid", v, (*string)(&m.UID))
				case "annotations":
					if storedjson.IsNull(v) {
						m.Annotations = nil
						return
					}
					m.Annotations = map[string]string{}
					walk("metadata.annotations", v, func(k, v []byte) {
						var a string
						str("metadata.annotations", v, &a)
						m.Annotations[string(k)] = a
					})
				case "deletionTimestamp":
					field("metadata.deletionTimestamp", v, &m.DeletionTimestamp)
				case "finalizers":
					field("metadata.finalizers", v, &m.Finalizers)
				case "ownerReferences":
					field("metadata.ownerReferences", v, &m.OwnerReferences)
				}
			})
		case "spec":
			walk("spec", v, func(k, v []byte) {
				if string(k) == "limits" {
					field("spec.limits", v, &s.Spec.Limits)
				}
			})
		case "status":
			walk("status", v, func(k, v []byte) {
				if string(k) == "phase" {
					str("status.phase", v, &s.Status.Phase)
				}
			})
		}
		return err == nil
	})
	if err == nil {
		err = e
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s stored at %s: %w", kind, key, err)
	}
	return &s, nil
}
