// Package crdlimits is the admission plugin that keeps one tenant's
// CustomResourceDefinitions from costing the others their memory: every
// served CRD is held in memory as validators, OpenAPI models and type
// converters, and a schema built to be large (a 1.4 MiB schema with a
// 100,000-value enum cost 70-100 MiB of RSS per workspace) multiplies that.
// It caps the enum values of one CRD and the schema bytes of all CRDs of one
// logical cluster. Upstream's own limits (request body size, CEL cost) still
// apply first.
package crdlimits

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiserver/pkg/admission"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/CRDLimits"

// Limits are the operator's caps; zero means no cap.
type Limits struct {
	// MaxEnumValues caps the enum values in all schemas of one CRD.
	MaxEnumValues int
	// MaxSchemaBytesPerCluster caps the JSON size of the schemas of all
	// CRDs of one logical cluster together.
	MaxSchemaBytesPerCluster int64
}

// DefaultLimits are well above public CRD bundles (the Gateway API's largest,
// HTTPRoute, has 174 enum values and 300 KB of schemas) and well below what
// made one workspace cost 100 MiB.
var DefaultLimits = Limits{MaxEnumValues: 10000, MaxSchemaBytesPerCluster: 16 << 20}

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
	limits *Limits
	crds   atomic.Pointer[func(logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition]
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}

// Register adds the plugin with the given limits (read when it admits).
func Register(plugins *admission.Plugins, limits *Limits) {
	instance.limits = limits
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// SetCRDs gives the plugin the CRDs of a logical cluster, once the server
// has them; until then the per-cluster total counts only the CRD at hand.
func SetCRDs(list func(logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition) {
	instance.crds.Store(&list)
}

var _ admission.ValidationInterface = &Plugin{}

func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != apiextensionsv1.Resource("customresourcedefinitions") || a.GetSubresource() != "" || p.limits == nil {
		return nil
	}
	internal, ok := a.GetObject().(*apiextensions.CustomResourceDefinition)
	if !ok {
		return nil
	}
	// Measured as stored and served (v1), like the cluster's other CRDs.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_apiextensions_CustomResourceDefinition_To_v1_CustomResourceDefinition(internal, crd, nil); err != nil {
		return nil
	}
	size, enums := measureV1(crd)
	if max := p.limits.MaxEnumValues; max > 0 && enums > max {
		return admission.NewForbidden(a, fmt.Errorf("the schemas of CustomResourceDefinition %s list %d enum values; this server allows at most %d per CustomResourceDefinition (kcp start --max-crd-enum-values)", crd.Name, enums, max))
	}
	max := p.limits.MaxSchemaBytesPerCluster
	if max <= 0 {
		return nil
	}
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	total := size
	if list := p.crds.Load(); list != nil {
		for _, other := range (*list)(cluster) {
			if other.Name == crd.Name {
				continue
			}
			s, _ := measureV1(other)
			total += s
		}
	}
	if total > max {
		return admission.NewForbidden(a, fmt.Errorf("the CustomResourceDefinitions of logical cluster %s would hold %d bytes of schemas with %s (%d bytes); this server allows at most %d per logical cluster (kcp start --max-crd-schema-bytes-per-workspace)", cluster, total, crd.Name, size, max))
	}
	return nil
}

// measureV1 returns the JSON size of a CRD's schemas and their enum values.
func measureV1(crd *apiextensionsv1.CustomResourceDefinition) (int64, int) {
	var schemas []any
	for i := range crd.Spec.Versions {
		schemas = append(schemas, crd.Spec.Versions[i].Schema)
	}
	return measureJSON(schemas)
}

func measureJSON(schemas []any) (int64, int) {
	b, err := json.Marshal(schemas)
	if err != nil {
		return 0, 0
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return int64(len(b)), 0
	}
	return int64(len(b)), countEnums(tree)
}

func countEnums(v any) int {
	n := 0
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if list, ok := c.([]any); ok && k == "enum" {
				n += len(list)
			}
			n += countEnums(c)
		}
	case []any:
		for _, c := range t {
			n += countEnums(c)
		}
	}
	return n
}
