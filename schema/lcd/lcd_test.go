package lcd

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func schema(t *testing.T, y string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	var s apiextensionsv1.JSONSchemaProps
	if err := yaml.UnmarshalStrict([]byte(y), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func paths(ps []Problem) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, "\n")
}

func TestSchemas(t *testing.T) {
	old := schema(t, `
type: object
required: [spec]
properties:
  spec:
    type: object
    properties:
      size: {type: integer, maximum: 10}
      color: {type: string, enum: [red, blue]}
      legacy: {type: string}
      tags: {type: array, items: {type: string}}
`)
	same := Schemas(old, old)
	if !same.Compatible() || same.LCD == nil {
		t.Fatalf("a schema against itself: %s", paths(same.Problems))
	}

	wider := schema(t, `
type: object
required: [spec]
properties:
  spec:
    type: object
    properties:
      size: {type: integer}
      color: {type: string, enum: [red, blue, green]}
      legacy: {type: string}
      tags: {type: array, items: {type: string}}
      extra: {type: boolean}
`)
	if r := Schemas(old, wider); !r.Compatible() {
		t.Errorf("a schema that only accepts more is compatible: %s", paths(r.Problems))
	}

	narrower := schema(t, `
type: object
required: [spec]
properties:
  spec:
    type: object
    required: [size]
    properties:
      size: {type: integer, maximum: 5}
      color: {type: string, enum: [red]}
      tags: {type: array, items: {type: string}}
`)
	r := Schemas(old, narrower)
	if r.Compatible() || r.Incompatible() || r.LCD == nil {
		t.Fatalf("narrowing: compatible=%v incompatible=%v\n%s", r.Compatible(), r.Incompatible(), paths(r.Problems))
	}
	got := paths(r.Problems)
	for _, want := range []string{".spec.legacy: narrower: field removed", `.spec: narrower: "size" is now required`, ".spec.size: narrower: maximum 5", `.spec.color: narrower: enum values "blue" no longer allowed`} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	spec := r.LCD.Properties["spec"]
	if _, ok := spec.Properties["legacy"]; ok {
		t.Error("the LCD keeps a field one side lacks")
	}
	if *spec.Properties["size"].Maximum != 5 || len(spec.Properties["color"].Enum) != 1 || len(spec.Required) != 1 {
		t.Errorf("the LCD is not the intersection: %+v", spec)
	}
	if old.Properties["spec"].Properties["legacy"].Type != "string" {
		t.Error("the input was modified")
	}

	conflict := schema(t, `
type: object
properties:
  spec:
    type: object
    properties:
      size: {type: string}
`)
	r = Schemas(old, conflict)
	if !r.Incompatible() || r.LCD != nil || !strings.Contains(paths(r.Problems), `.spec.size: incompatible: type "integer" against "string"`) {
		t.Errorf("a type conflict: %v\n%s", r.LCD, paths(r.Problems))
	}
}

func TestCRDs(t *testing.T) {
	crd := func(group, version, fields string) *apiextensionsv1.CustomResourceDefinition {
		var c apiextensionsv1.CustomResourceDefinition
		y := `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.` + group + `}
spec:
  group: ` + group + `
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: ` + version + `
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties: {` + fields + `}
`
		if err := yaml.UnmarshalStrict([]byte(y), &c); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	out, problems := CRDs(crd("example.com", "v1", "a: {type: string}, b: {type: string}"), crd("example.com", "v1", "a: {type: string}"))
	if out == nil || len(problems) != 1 {
		t.Fatalf("LCD: %v %s", out, paths(problems))
	}
	if _, ok := out.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["b"]; ok {
		t.Error("field b survived")
	}
	if out, problems := CRDs(crd("example.com", "v1", ""), crd("other.com", "v1", "")); out != nil || !strings.Contains(paths(problems), "spec.group") {
		t.Errorf("different groups: %v %s", out, paths(problems))
	}
	if out, problems := CRDs(crd("example.com", "v1", ""), crd("example.com", "v2", "")); out != nil || !strings.Contains(paths(problems), "no version") {
		t.Errorf("no common version: %v %s", out, paths(problems))
	}
}
