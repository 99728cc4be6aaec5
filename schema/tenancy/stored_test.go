package tenancy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeStored: the fields kcp's caches keep read as encoding/json
// reads them from a whole stored Workspace (managed fields and all);
// values that are not JSON objects, or fields of the wrong type, are
// errors naming the key.
func TestDecodeStored(t *testing.T) {
	full := `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"annotations":{"kcp.io/cluster":"root","kcp.io/owner":"{\"username\":\"al\\\"ice\"}"},` +
		`"creationTimestamp":"2026-11-26T23:00:00Z","deletionTimestamp":"2026-11-26T23:30:00Z","finalizers":["kcp.io/workspace"],"generation":1,` +
		`"managedFields":[{"apiVersion":"tenancy.kcp.io/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:name":{}},"f:status":{"f:phase":{}}},"manager":"kubectl","operation":"Update"}],` +
		`"name":"team-a","ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"x","uid":"u-9"}],"resourceVersion":"7","uid":"u-1"},` +
		`"spec":{"limits":{"objects":100,"bytes":2048},"frozen":{"reason":"incident 4711"},"type":{"name":"team"}},"status":{"URL":"https://x","cluster":"root:team-a","phase":"Ready"}}`
	for _, doc := range []string{full, `{"metadata":{"name":"a","uid":"u"},"spec":null,"status":{}}`, `{}`,
		`{"metadata":{"annotations":{},"name":null,"uid":"\u0075"}}`, `{"metadata":{"annotations":null}}`, `{"metadata":{"annotations":{"a":null,"b\"":"c"}}}`, `{"spec":{"frozen":null}}`, `{"spec":{"frozen":{}}}`} {
		got, err := DecodeStored("Workspace", "k", []byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		var want Stored
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("DecodeStored(%s) = %+v, encoding/json reads %+v", doc, *got, want)
		}
	}
	if got, _ := DecodeStored("Workspace", "k", []byte(full)); got.Spec.Limits.Objects != 100 || got.Spec.Frozen == nil || got.Spec.Frozen.Reason != "incident 4711" || got.Status.Phase != "Ready" || got.Metadata.DeletionTimestamp == nil || len(got.Metadata.OwnerReferences) != 1 {
		t.Errorf("fields missing: %+v", got)
	}
	for _, bad := range []string{full[:len(full)-1], `[]`, `{"metadata":{"uid":5}}`, `{"metadata":{"finalizers":"x"}}`, `{"spec":{"limits":{"objects":"many"}}}`, `{"status":[]}`, `{"metadata":{"annotations":{"a":1}}}`, `{"metadata":{"name":["a"]}}`, `{"spec":{"frozen":"yes"}}`} {
		if _, err := DecodeStored("Workspace", "/registry/k", []byte(bad)); err == nil || !strings.Contains(err.Error(), "/registry/k") {
			t.Errorf("DecodeStored(%s): error %v, want one naming the key", bad, err)
		}
	}
}
