package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"

	"github.com/kcpsql/kcp/schema/workload"
)

// BuiltInImports are the built-in workload kinds a syncer reports the
// physical cluster's schema of (from its OpenAPI v3), so that kcp
// negotiates what every physical cluster of a location accepts.
func BuiltInImports() []ImportedResource {
	var out []ImportedResource
	for _, gr := range workload.WorkloadResources {
		for _, gvr := range workload.SyncedResources {
			if gvr.GroupResource() == gr {
				out = append(out, ImportedResource{GroupResource: gr, Storage: gvr})
			}
		}
	}
	return out
}

// builtInSpec reads a built-in resource's schema from the physical
// cluster's OpenAPI v3 and writes it as a CustomResourceDefinition spec
// (what APIResourceImport carries): references inlined, descriptions and
// status left out (only what a workspace may write is negotiated),
// metadata as a plain object.
func builtInSpec(ctx context.Context, disc discovery.DiscoveryInterface, oapi openapi.Client, gvr schema.GroupVersionResource) (*apiextensionsv1.CustomResourceDefinitionSpec, error) {
	paths, err := oapi.Paths()
	if err != nil {
		return nil, fmt.Errorf("reading the physical cluster's OpenAPI v3: %v", err)
	}
	path := "apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		path = "api/" + gvr.Version
	}
	gv, ok := paths[path]
	if !ok {
		return nil, fmt.Errorf("the physical cluster serves no %s", gvr.GroupVersion())
	}
	raw, err := gv.Schema("application/json")
	if err != nil {
		return nil, err
	}
	kind, list, singular, err := kindOf(disc, gvr)
	if err != nil {
		return nil, err
	}
	props, err := openAPIToSchema(raw, gvr.GroupVersion().WithKind(kind))
	if err != nil {
		return nil, err
	}
	return &apiextensionsv1.CustomResourceDefinitionSpec{
		Group: gvr.Group,
		Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: gvr.Resource, Singular: singular, Kind: kind, ListKind: list},
		Scope: apiextensionsv1.NamespaceScoped,
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
			Name: gvr.Version, Served: true, Storage: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: props},
		}},
		Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
	}, nil
}

func kindOf(disc discovery.DiscoveryInterface, gvr schema.GroupVersionResource) (kind, list, singular string, err error) {
	rl, err := disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return "", "", "", err
	}
	for _, r := range rl.APIResources {
		if r.Name == gvr.Resource {
			singular = r.SingularName
			if singular == "" {
				singular = strings.ToLower(r.Kind)
			}
			return r.Kind, r.Kind + "List", singular, nil
		}
	}
	return "", "", "", fmt.Errorf("the physical cluster serves no %s in %s", gvr.Resource, gvr.GroupVersion())
}

// openAPIToSchema finds the schema of gvk in an OpenAPI v3 document and
// returns it self-contained, in the form of a CRD's schema.
func openAPIToSchema(doc []byte, gvk schema.GroupVersionKind) (*apiextensionsv1.JSONSchemaProps, error) {
	var d struct {
		Components struct {
			Schemas map[string]map[string]interface{} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var root map[string]interface{}
	for _, s := range d.Components.Schemas {
		gvks, _ := s["x-kubernetes-group-version-kind"].([]interface{})
		for _, g := range gvks {
			m, _ := g.(map[string]interface{})
			if m["group"] == gvk.Group && m["version"] == gvk.Version && m["kind"] == gvk.Kind {
				root = s
			}
		}
	}
	if root == nil {
		return nil, fmt.Errorf("no schema of %s in the physical cluster's OpenAPI v3", gvk)
	}
	props := root["properties"].(map[string]interface{})
	delete(props, "status")
	props["metadata"] = map[string]interface{}{"type": "object"}
	out, err := inline(root, d.Components.Schemas, 0)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	var s apiextensionsv1.JSONSchemaProps
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// inline returns s with every $ref replaced by what it names, without
// descriptions, and with OpenAPI's "one of string or number" (quantities)
// as x-kubernetes-int-or-string, the form CRD schemas have.
func inline(s map[string]interface{}, all map[string]map[string]interface{}, depth int) (map[string]interface{}, error) {
	if depth > 64 {
		return nil, fmt.Errorf("schema nested too deep (a recursive type?)")
	}
	// allOf: [{$ref}] is how OpenAPI v3 gives a reference a default.
	if allOf, ok := s["allOf"].([]interface{}); ok && len(allOf) == 1 {
		merged := map[string]interface{}{}
		for k, v := range allOf[0].(map[string]interface{}) {
			merged[k] = v
		}
		for k, v := range s {
			if k != "allOf" {
				merged[k] = v
			}
		}
		s = merged
	}
	if ref, ok := s["$ref"].(string); ok {
		target, found := all[strings.TrimPrefix(ref, "#/components/schemas/")]
		if !found {
			return nil, fmt.Errorf("unresolved reference %s", ref)
		}
		merged := map[string]interface{}{}
		for k, v := range target {
			merged[k] = v
		}
		for k, v := range s {
			if k != "$ref" {
				merged[k] = v
			}
		}
		s = merged
	}
	out := map[string]interface{}{}
	for k, v := range s {
		switch k {
		case "description", "$ref", "x-kubernetes-group-version-kind", "x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy", "x-kubernetes-unions", "default":
			continue
		case "oneOf":
			out["x-kubernetes-int-or-string"] = true
			continue
		case "properties":
			props := map[string]interface{}{}
			for name, p := range v.(map[string]interface{}) {
				in, err := inline(p.(map[string]interface{}), all, depth+1)
				if err != nil {
					return nil, err
				}
				props[name] = in
			}
			out[k] = props
		case "items", "additionalProperties":
			if m, ok := v.(map[string]interface{}); ok {
				in, err := inline(m, all, depth+1)
				if err != nil {
					return nil, err
				}
				out[k] = in
			} else {
				out[k] = v
			}
		default:
			out[k] = v
		}
	}
	if out["x-kubernetes-int-or-string"] == true {
		delete(out, "type")
	}
	return out, nil
}
