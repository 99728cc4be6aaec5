// Package lcd compares API schemas (structural OpenAPI v3 schemas, as in
// CustomResourceDefinitions) and computes their least common denominator:
// the schema that accepts exactly what every one of them accepts. It is
// the core of API negotiation across physical clusters (a field one cluster
// lacks is dropped; a type conflict cannot be negotiated) and of
// `kcp compat`.
package lcd

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Problem is one difference at a path of the schema.
type Problem struct {
	Path string
	// Incompatible: no schema accepts what both do (a type conflict);
	// otherwise NEW merely accepts less than OLD (narrowing).
	Incompatible bool
	Message      string
}

func (p Problem) String() string {
	kind := "narrower"
	if p.Incompatible {
		kind = "incompatible"
	}
	return fmt.Sprintf("%s: %s: %s", p.Path, kind, p.Message)
}

// Result of comparing two schemas.
type Result struct {
	// LCD accepts what both accept; nil when they are incompatible.
	LCD      *apiextensionsv1.JSONSchemaProps
	Problems []Problem
}

// Compatible: NEW accepts everything OLD accepts.
func (r Result) Compatible() bool { return len(r.Problems) == 0 }

// Incompatible: there is no common denominator.
func (r Result) Incompatible() bool {
	for _, p := range r.Problems {
		if p.Incompatible {
			return true
		}
	}
	return false
}

// Schemas compares old and new: Problems lists where new accepts less
// than old (or conflicts with it), and LCD is their intersection.
func Schemas(old, new *apiextensionsv1.JSONSchemaProps) Result {
	c := &comparer{}
	out := c.schema("", old, new)
	if c.incompatible {
		out = nil
	}
	return Result{LCD: out, Problems: c.problems}
}

type comparer struct {
	problems     []Problem
	incompatible bool
}

func (c *comparer) narrower(path, format string, a ...any) {
	c.problems = append(c.problems, Problem{Path: orRoot(path), Message: fmt.Sprintf(format, a...)})
}

func (c *comparer) conflict(path, format string, a ...any) {
	c.incompatible = true
	c.problems = append(c.problems, Problem{Path: orRoot(path), Incompatible: true, Message: fmt.Sprintf(format, a...)})
}

func orRoot(p string) string {
	if p == "" {
		return "<root>"
	}
	return p
}

func (c *comparer) schema(path string, old, new *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	switch {
	case old == nil && new == nil:
		return nil
	case old == nil:
		return new.DeepCopy()
	case new == nil:
		return old.DeepCopy()
	}
	out := old.DeepCopy()
	if old.Type != new.Type {
		c.conflict(path, "type %q against %q", old.Type, new.Type)
		return out
	}
	if boolOf(old.XIntOrString) != boolOf(new.XIntOrString) {
		c.conflict(path, "x-kubernetes-int-or-string differs")
		return out
	}
	if old.Format != new.Format {
		if new.Format == "" {
			// new accepts any format: the LCD keeps old's.
		} else if old.Format == "" {
			c.narrower(path, "format %q added", new.Format)
			out.Format = new.Format
		} else {
			c.conflict(path, "format %q against %q", old.Format, new.Format)
			return out
		}
	}
	if boolOf(old.Nullable) && !boolOf(new.Nullable) {
		c.narrower(path, "no longer nullable")
		out.Nullable = false
	}
	c.enum(path, old, new, out)
	c.bounds(path, old, new, out)
	if new.Pattern != "" && new.Pattern != old.Pattern {
		if old.Pattern != "" {
			c.conflict(path, "pattern %q against %q", old.Pattern, new.Pattern)
			return out
		}
		c.narrower(path, "pattern %q added", new.Pattern)
		out.Pattern = new.Pattern
	}
	// Required: the union (an object must satisfy both).
	req := map[string]bool{}
	for _, r := range old.Required {
		req[r] = true
	}
	for _, r := range new.Required {
		if !req[r] {
			c.narrower(path, "%q is now required", r)
			req[r] = true
		}
	}
	out.Required = sortedKeys(req)
	// Properties: the intersection, unless a side keeps unknown fields.
	oldOpen, newOpen := boolOf(old.XPreserveUnknownFields), boolOf(new.XPreserveUnknownFields)
	if oldOpen && !newOpen {
		c.narrower(path, "no longer keeps unknown fields")
		out.XPreserveUnknownFields = nil
	}
	if len(old.Properties) > 0 || len(new.Properties) > 0 {
		out.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
		for name, o := range old.Properties {
			p := path + "." + name
			n, ok := new.Properties[name]
			switch {
			case ok:
				if s := c.schema(p, &o, &n); s != nil {
					out.Properties[name] = *s
				}
			case newOpen:
				out.Properties[name] = o
			default:
				c.narrower(p, "field removed")
				delete(req, name)
			}
		}
		for name, n := range new.Properties {
			if _, ok := old.Properties[name]; !ok && oldOpen {
				out.Properties[name] = n
			}
		}
		out.Required = nil
		for _, r := range sortedKeys(req) {
			if _, ok := out.Properties[r]; ok || len(out.Properties) == 0 {
				out.Required = append(out.Required, r)
			}
		}
	}
	if old.Items != nil || new.Items != nil {
		var o, n *apiextensionsv1.JSONSchemaProps
		if old.Items != nil {
			o = old.Items.Schema
		}
		if new.Items != nil {
			n = new.Items.Schema
		}
		if s := c.schema(path+"[]", o, n); s != nil {
			out.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: s}
		}
	}
	if old.AdditionalProperties != nil || new.AdditionalProperties != nil {
		var o, n *apiextensionsv1.JSONSchemaProps
		if old.AdditionalProperties != nil {
			o = old.AdditionalProperties.Schema
		}
		if new.AdditionalProperties != nil {
			n = new.AdditionalProperties.Schema
		}
		if s := c.schema(path+"{}", o, n); s != nil {
			out.AdditionalProperties = &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: s}
		}
	}
	if !reflect.DeepEqual(old.XListType, new.XListType) || !reflect.DeepEqual(old.XListMapKeys, new.XListMapKeys) || !reflect.DeepEqual(old.XMapType, new.XMapType) {
		c.conflict(path, "list or map type differs (x-kubernetes-list-type, -list-map-keys, -map-type)")
	}
	if boolOf(old.XEmbeddedResource) != boolOf(new.XEmbeddedResource) {
		c.conflict(path, "x-kubernetes-embedded-resource differs")
	}
	return out
}

func (c *comparer) enum(path string, old, new, out *apiextensionsv1.JSONSchemaProps) {
	if len(new.Enum) == 0 {
		return
	}
	if len(old.Enum) == 0 {
		c.narrower(path, "enum added")
		out.Enum = new.Enum
		return
	}
	in := map[string]bool{}
	for _, v := range new.Enum {
		in[string(v.Raw)] = true
	}
	out.Enum = nil
	var dropped []string
	for _, v := range old.Enum {
		if in[string(v.Raw)] {
			out.Enum = append(out.Enum, v)
		} else {
			dropped = append(dropped, string(v.Raw))
		}
	}
	if len(dropped) > 0 {
		c.narrower(path, "enum values %s no longer allowed", strings.Join(dropped, ", "))
	}
	if len(out.Enum) == 0 {
		c.conflict(path, "no enum value is allowed by both")
	}
}

func (c *comparer) bounds(path string, old, new, out *apiextensionsv1.JSONSchemaProps) {
	tighterMax := func(what string, o, n *float64, set func(*float64)) {
		if n != nil && (o == nil || *n < *o) {
			c.narrower(path, "%s %v", what, *n)
			set(n)
		}
	}
	tighterMin := func(what string, o, n *float64, set func(*float64)) {
		if n != nil && (o == nil || *n > *o) {
			c.narrower(path, "%s %v", what, *n)
			set(n)
		}
	}
	tighterMax("maximum", old.Maximum, new.Maximum, func(v *float64) { out.Maximum = v })
	tighterMin("minimum", old.Minimum, new.Minimum, func(v *float64) { out.Minimum = v })
	ints := func(what string, o, n *int64, smaller bool, set func(*int64)) {
		if n == nil {
			return
		}
		if o == nil || (smaller && *n < *o) || (!smaller && *n > *o) {
			c.narrower(path, "%s %d", what, *n)
			set(n)
		}
	}
	ints("maxLength", old.MaxLength, new.MaxLength, true, func(v *int64) { out.MaxLength = v })
	ints("minLength", old.MinLength, new.MinLength, false, func(v *int64) { out.MinLength = v })
	ints("maxItems", old.MaxItems, new.MaxItems, true, func(v *int64) { out.MaxItems = v })
	ints("minItems", old.MinItems, new.MinItems, false, func(v *int64) { out.MinItems = v })
	ints("maxProperties", old.MaxProperties, new.MaxProperties, true, func(v *int64) { out.MaxProperties = v })
	ints("minProperties", old.MinProperties, new.MinProperties, false, func(v *int64) { out.MinProperties = v })
}

func boolOf(b interface{}) bool {
	switch v := b.(type) {
	case bool:
		return v
	case *bool:
		return v != nil && *v
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// CRDs compares two definitions of the same resource: the same group,
// names and scope; versions served by both are compared (one only one
// serves is dropped from the LCD and reported).
func CRDs(old, new *apiextensionsv1.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinition, []Problem) {
	var problems []Problem
	conflict := func(path, format string, a ...any) {
		problems = append(problems, Problem{Path: path, Incompatible: true, Message: fmt.Sprintf(format, a...)})
	}
	if old.Spec.Group != new.Spec.Group {
		conflict("spec.group", "%q against %q", old.Spec.Group, new.Spec.Group)
	}
	if old.Spec.Names.Plural != new.Spec.Names.Plural || old.Spec.Names.Kind != new.Spec.Names.Kind {
		conflict("spec.names", "%s/%s against %s/%s", old.Spec.Names.Plural, old.Spec.Names.Kind, new.Spec.Names.Plural, new.Spec.Names.Kind)
	}
	if old.Spec.Scope != new.Spec.Scope {
		conflict("spec.scope", "%s against %s", old.Spec.Scope, new.Spec.Scope)
	}
	out := old.DeepCopy()
	out.Spec.Versions = nil
	newVersions := map[string]apiextensionsv1.CustomResourceDefinitionVersion{}
	for _, v := range new.Spec.Versions {
		newVersions[v.Name] = v
	}
	for _, ov := range old.Spec.Versions {
		if !ov.Served {
			continue
		}
		nv, ok := newVersions[ov.Name]
		if !ok || !nv.Served {
			problems = append(problems, Problem{Path: "spec.versions[" + ov.Name + "]", Message: "version not served"})
			continue
		}
		var os, ns *apiextensionsv1.JSONSchemaProps
		if ov.Schema != nil {
			os = ov.Schema.OpenAPIV3Schema
		}
		if nv.Schema != nil {
			ns = nv.Schema.OpenAPIV3Schema
		}
		r := Schemas(os, ns)
		for _, p := range r.Problems {
			p.Path = "spec.versions[" + ov.Name + "].schema" + strings.TrimPrefix(p.Path, "<root>")
			problems = append(problems, p)
		}
		if r.LCD != nil {
			v := *ov.DeepCopy()
			v.Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: r.LCD}
			out.Spec.Versions = append(out.Spec.Versions, v)
		}
	}
	if len(out.Spec.Versions) == 0 {
		conflict("spec.versions", "no version is served compatibly by both")
	} else {
		storage := false
		for _, v := range out.Spec.Versions {
			storage = storage || v.Storage
		}
		if !storage {
			out.Spec.Versions[0].Storage = true
		}
	}
	for _, p := range problems {
		if p.Incompatible {
			return nil, problems
		}
	}
	return out, problems
}
