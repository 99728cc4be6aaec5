package placement

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	_ "k8s.io/kubernetes/pkg/apis/apps/install" // the conversions checkNegotiated uses
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"

	"github.com/kcpsql/kcp/schema/apiresource"
	negotiatedapis "github.com/kcpsql/kcp/server/negotiated"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

var builtInSchemas atomic.Pointer[func(logicalcluster.Name, schema.GroupResource) []negotiatedapis.LocationSchema]

// SetBuiltInSchemas gives the plugin the schemas negotiated for the
// built-in workload kinds in the locations a cluster places on.
func SetBuiltInSchemas(f func(logicalcluster.Name, schema.GroupResource) []negotiatedapis.LocationSchema) {
	builtInSchemas.Store(&f)
}

// structurals caches the structural form of negotiated schemas, by
// location and resource; an entry is rebuilt when its schema changes.
var structurals sync.Map // string -> structuralEntry

type structuralEntry struct {
	schema     *apiextensionsv1.JSONSchemaProps
	structural *structuralschema.Structural
}

func structuralOf(key string, s *apiextensionsv1.JSONSchemaProps) (*structuralschema.Structural, error) {
	if e, ok := structurals.Load(key); ok && e.(structuralEntry).schema == s {
		return e.(structuralEntry).structural, nil
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(s, internal, nil); err != nil {
		return nil, err
	}
	st, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, err
	}
	structurals.Store(key, structuralEntry{schema: s, structural: st})
	return st, nil
}

// checkNegotiated refuses a built-in workload object (a Deployment,
// Service, Ingress) that sets fields some physical cluster of a location
// the workspace places on does not have: the least common denominator
// that kcp negotiated from the schemas the syncers report. Such a field
// would be dropped there without a word; refused, the user learns it.
func checkNegotiated(cluster logicalcluster.Name, gr schema.GroupResource, a admission.Attributes) error {
	f := builtInSchemas.Load()
	if f == nil {
		return nil
	}
	schemas := (*f)(cluster, gr)
	if len(schemas) == 0 {
		return nil
	}
	for _, ls := range schemas {
		ext, err := legacyscheme.Scheme.ConvertToVersion(a.GetObject(), schema.GroupVersion{Group: gr.Group, Version: ls.Version})
		if err != nil {
			return nil // not a kind this check knows
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ext)
		if err != nil {
			return nil
		}
		delete(u, "status") // the physical cluster's own; not negotiated
		dropEmpty(u)        // unset fields (null, {}, []) say nothing a cluster could lack
		st, err := structuralOf(string(ls.Location)+"|"+gr.String(), ls.Schema)
		if err != nil {
			return admission.NewForbidden(a, fmt.Errorf("the schema negotiated for %s in %s cannot be used: %v", gr, ls.Location, err))
		}
		unknown := pruning.PruneWithOptions(u, st, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
		if len(unknown) > 0 {
			return admission.NewForbidden(a, fmt.Errorf("%s: not accepted by every physical cluster of location %s "+
				"(the negotiated %s lacks %s; kubectl get negotiatedapiresource %s -o jsonpath='{.status.dropped}' in %s says which cluster)",
				strings.Join(unknown, ", "), ls.Location, apiresource.NegotiatedName(gr), plural(len(unknown), "it", "them"), apiresource.NegotiatedName(gr), ls.Location))
		}
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// dropEmpty removes null values and empty objects and lists, depth first.
func dropEmpty(m map[string]interface{}) {
	for k, v := range m {
		if empty(v) {
			delete(m, k)
		}
	}
}

func empty(v interface{}) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]interface{}:
		dropEmpty(x)
		return len(x) == 0
	case []interface{}:
		for _, e := range x {
			empty(e) // clean elements; an element itself stays (indexes mean something)
		}
		return len(x) == 0
	}
	return false
}
