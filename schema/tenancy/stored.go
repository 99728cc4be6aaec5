package tenancy

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// DecodeStored reads the Stored fields of the kind stored at key.
func DecodeStored(kind, key string, value []byte) (*Stored, error) {
	var s Stored
	if err := json.Unmarshal(value, &s); err != nil {
		return nil, fmt.Errorf("reading the %s stored at %s: %w", kind, key, err)
	}
	return &s, nil
}
