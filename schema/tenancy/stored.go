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
		Limits Limits  `json:"limits"`
		Frozen *Frozen `json:"frozen"`
		Shard  string  `json:"shard"`
		// Owner is a LogicalCluster's spec.owner.
		Owner struct {
			Cluster string `json:"cluster"`
			Name    string `json:"name"`
			UID     string `json:"uid"`
			Shard   string `json:"shard"`
		} `json:"owner"`
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
	m := &s.Metadata
	err := storedjson.Object(value, func(k, v []byte) error {
		switch string(k) {
		case "metadata":
			return storedjson.Object(v, func(k, v []byte) error {
				switch string(k) {
				case "name":
					return memberString("metadata.name", v, &m.Name)
				case "uid":
					return memberString("metadata.uid", v, (*string)(&m.UID))
				case "annotations":
					if storedjson.IsNull(v) {
						m.Annotations = nil
						return nil
					}
					m.Annotations = map[string]string{}
					return storedjson.Object(v, func(k, v []byte) error {
						var a string
						err := memberString("metadata.annotations", v, &a)
						m.Annotations[string(k)] = a
						return err
					})
				case "deletionTimestamp":
					return memberValue("metadata.deletionTimestamp", v, &m.DeletionTimestamp)
				case "finalizers":
					return memberValue("metadata.finalizers", v, &m.Finalizers)
				case "ownerReferences":
					return memberValue("metadata.ownerReferences", v, &m.OwnerReferences)
				}
				return nil
			})
		case "spec":
			return storedjson.Object(v, func(k, v []byte) error {
				switch string(k) {
				case "limits":
					return memberValue("spec.limits", v, &s.Spec.Limits)
				case "frozen":
					return memberValue("spec.frozen", v, &s.Spec.Frozen)
				case "shard":
					return memberValue("spec.shard", v, &s.Spec.Shard)
				case "owner":
					if storedjson.IsNull(v) {
						return nil
					}
					return memberValue("spec.owner", v, &s.Spec.Owner)
				}
				return nil
			})
		case "status":
			return storedjson.Object(v, func(k, v []byte) error {
				if string(k) == "phase" {
					return memberString("status.phase", v, &s.Status.Phase)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the %s stored at %s: %w", kind, key, err)
	}
	return &s, nil
}

// memberValue decodes one member's value into dst.
func memberValue(name string, raw []byte, dst any) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// memberString reads a string member; null leaves it empty.
func memberString(name string, raw []byte, dst *string) error {
	if v, ok := storedjson.String(raw); ok {
		*dst = v
		return nil
	}
	if storedjson.IsNull(raw) {
		return nil
	}
	return memberValue(name, raw, dst) // the error encoding/json gives
}
