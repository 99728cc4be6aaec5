package syncer

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestOpenAPIToSchema: a kind's schema from an OpenAPI v3 document comes
// out self-contained, in a CRD schema's form: references (also behind
// allOf) inlined, quantities as int-or-string, no descriptions, no status,
// metadata a plain object.
func TestOpenAPIToSchema(t *testing.T) {
	doc := `{"components":{"schemas":{
	  "io.example.v1.Thing":{"type":"object","description":"a thing",
	    "x-kubernetes-group-version-kind":[{"group":"example.com","version":"v1","kind":"Thing"}],
	    "properties":{"apiVersion":{"type":"string"},"kind":{"type":"string"},
	      "metadata":{"allOf":[{"$ref":"#/components/schemas/io.meta.ObjectMeta"}],"default":{}},
	      "spec":{"allOf":[{"$ref":"#/components/schemas/io.example.v1.ThingSpec"}],"default":{}},
	      "status":{"$ref":"#/components/schemas/io.example.v1.ThingStatus"}}},
	  "io.example.v1.ThingSpec":{"type":"object","properties":{
	      "size":{"oneOf":[{"type":"string"},{"type":"number"}]},
	      "parts":{"type":"array","items":{"$ref":"#/components/schemas/io.example.v1.Part"}},
	      "port":{"x-kubernetes-int-or-string":true,"format":"int-or-string"}}},
	  "io.example.v1.Part":{"type":"object","description":"x","properties":{"name":{"type":"string","description":"y"}},"required":["name"]},
	  "io.example.v1.ThingStatus":{"type":"object"},
	  "io.meta.ObjectMeta":{"type":"object","properties":{"name":{"type":"string"}}}}}}`
	s, err := openAPIToSchema([]byte(doc), schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Thing"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s)
	want := `{"type":"object","properties":{"apiVersion":{"type":"string"},"kind":{"type":"string"},"metadata":{"type":"object"},` +
		`"spec":{"type":"object","properties":{"parts":{"type":"array","items":{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}},` +
		`"port":{"format":"int-or-string","x-kubernetes-int-or-string":true},"size":{"x-kubernetes-int-or-string":true}}}}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := openAPIToSchema([]byte(doc), schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Other"}); err == nil {
		t.Error("a kind the document lacks: no error")
	}
	if _, err := openAPIToSchema([]byte(`{"components":{"schemas":{"a":{"x-kubernetes-group-version-kind":[{"group":"g","version":"v","kind":"K"}],"properties":{"spec":{"$ref":"#/components/schemas/missing"}}}}}}`),
		schema.GroupVersionKind{Group: "g", Version: "v", Kind: "K"}); err == nil {
		t.Error("an unresolved reference: no error")
	}
}
