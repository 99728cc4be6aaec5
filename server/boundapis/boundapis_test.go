package boundapis

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func schemaOf(name string, versions ...apiextensionsv1.CustomResourceDefinitionVersion) *apis.APIResourceSchema {
	return &apis.APIResourceSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u1", ResourceVersion: "7"},
		Spec: apis.APIResourceSchemaSpec{Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"}, Versions: versions},
	}
}

var objectSchema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}}

func TestDefinition(t *testing.T) {
	good := schemaOf("v1.widgets.example.com", apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true, Storage: true, Schema: objectSchema})
	crd, err := Definition(good, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if crd.Name != "widgets.example.com" || crd.Status.AcceptedNames.ListKind != "WidgetList" || crd.Status.AcceptedNames.Singular != "widget" ||
		crd.Annotations[apis.IdentityAnnotation] != "abc" || crd.Status.StoredVersions[0] != "v1" {
		t.Errorf("unexpected definition: %+v", crd)
	}
	other, _ := Definition(good, "def")
	if other.UID == crd.UID {
		t.Error("two identities gave one UID: serving state would not be rebuilt when a binding's export changes")
	}
	for name, bad := range map[string]*apis.APIResourceSchema{
		"two storage versions": schemaOf("v1.widgets.example.com",
			apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true, Storage: true, Schema: objectSchema},
			apiextensionsv1.CustomResourceDefinitionVersion{Name: "v2", Served: true, Storage: true, Schema: objectSchema}),
		"no schema": schemaOf("v1.widgets.example.com", apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true, Storage: true}),
		"non-structural": schemaOf("v1.widgets.example.com", apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true, Storage: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {}}}}}),
	} {
		if _, err := Definition(bad, "abc"); err == nil || !strings.Contains(err.Error(), "v1.widgets.example.com") {
			t.Errorf("%s: want an error naming the schema, got %v", name, err)
		}
	}
}

func TestIdentity(t *testing.T) {
	a := apis.Identity("root:platform", "databases", "uid-1")
	for _, other := range []string{
		apis.Identity("root:platform2", "databases", "uid-1"),
		apis.Identity("root:platform", "databases2", "uid-1"),
		apis.Identity("root:platform", "databases", "uid-2"),
		apis.Identity("root:platfor", "mdatabases", "uid-1"),
	} {
		if other == a {
			t.Errorf("two exports share identity %s", a)
		}
	}
	if strings.ContainsAny(a, "/:") {
		t.Errorf("identity %q would break the key layout", a)
	}
}

// TestSameSelector: an acceptance matches a claim only if their selectors
// select the same objects; absent and empty both mean every object.
func TestSameSelector(t *testing.T) {
	db := &metav1.LabelSelector{MatchLabels: map[string]string{"db": "true"}}
	dbExpr := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "db", Operator: metav1.LabelSelectorOpIn, Values: []string{"true"}}}}
	other := &metav1.LabelSelector{MatchLabels: map[string]string{"db": "false"}}
	invalid := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "db", Operator: "Near"}}}
	for _, c := range []struct {
		a, b *metav1.LabelSelector
		want bool
	}{
		{nil, nil, true},
		{nil, &metav1.LabelSelector{}, true},
		{db, db.DeepCopy(), true},
		{db, dbExpr, false}, // "db=true" and "db in (true)" read differently; accept again
		{db, nil, false},
		{nil, db, false},
		{db, other, false},
		{invalid, invalid, false},
	} {
		if got := SameSelector(c.a, c.b); got != c.want {
			t.Errorf("SameSelector(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestConsumerDefinition: a consumer's definition names its cluster and
// binding, leaves the export's own untouched and holds no copy of the
// schema.
func TestConsumerDefinition(t *testing.T) {
	def, err := Definition(schemaOf("v1.widgets.example.com", apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true, Storage: true, Schema: objectSchema}), "abc")
	if err != nil {
		t.Fatal(err)
	}
	def.Annotations[logicalcluster.Annotation] = "root:platform"
	a := consumerDefinition(def, "root:team-a", "widgets")
	b := consumerDefinition(def, "root:team-b", "widgets-b")
	for _, c := range []struct {
		crd              *apiextensionsv1.CustomResourceDefinition
		cluster, binding string
	}{{a, "root:team-a", "widgets"}, {b, "root:team-b", "widgets-b"}, {def, "root:platform", ""}} {
		if got := c.crd.Annotations[logicalcluster.Annotation]; got != c.cluster {
			t.Errorf("cluster annotation %q, want %q", got, c.cluster)
		}
		if got := c.crd.Annotations[apis.BindingAnnotation]; got != c.binding {
			t.Errorf("binding annotation %q, want %q", got, c.binding)
		}
		if c.crd.Annotations[apis.IdentityAnnotation] != "abc" || c.crd.UID != def.UID || c.crd.Name != def.Name {
			t.Errorf("identity, UID or name not the export's: %+v", c.crd.ObjectMeta)
		}
	}
	if &a.Spec.Versions[0] != &def.Spec.Versions[0] || a.Spec.Versions[0].Schema != def.Spec.Versions[0].Schema {
		t.Error("the consumer's definition holds a copy of the export's versions and schema")
	}
}
