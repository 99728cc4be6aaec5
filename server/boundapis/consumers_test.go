package boundapis

import (
	"fmt"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func objectIn(cluster, name string, spec map[string]interface{}) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{"spec": spec}}
	u.SetName(name)
	u.SetUID(types.UID("uid-" + cluster + "-" + name))
	u.SetAnnotations(map[string]string{logicalcluster.Annotation: cluster})
	return u
}

func bindingOf(cluster, name, path, export string) *unstructured.Unstructured {
	return objectIn(cluster, name, map[string]interface{}{
		"reference": map[string]interface{}{"export": map[string]interface{}{"path": path, "name": export}},
	})
}

// TestConsumersOutside: the consumers that hold a workspace tree's deletion
// back are the bindings, from outside the tree, of the exports in it; not
// bindings from inside, not bindings of another tree whose name shares a
// prefix, not bindings of an export that does not exist.
func TestConsumersOutside(t *testing.T) {
	x := New(nil)
	x.exports = cache.NewIndexer(clusterinformer.KeyFunc, exportIndexers())
	x.bindings = cache.NewIndexer(clusterinformer.KeyFunc, bindingIndexers())
	for _, e := range []*unstructured.Unstructured{
		objectIn("root:org", "top", nil),
		objectIn("root:org:inner", "databases", nil),
		objectIn("root:org-2", "databases", nil),
		objectIn("root:lonely", "unbound", nil),
	} {
		if err := x.exports.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range []*unstructured.Unstructured{
		bindingOf("root:team-b", "databases", "root:org:inner", "databases"),
		bindingOf("root:team-a", "databases", "root:org:inner", "databases"),
		bindingOf("root:org", "databases", "root:org:inner", "databases"),       // inside the tree
		bindingOf("root:org:inner:x", "top", "root:org", "top"),                 // inside the tree
		bindingOf("root:team-c", "databases", "root:org-2", "databases"),        // another tree
		bindingOf("root:team-d", "missing", "root:org:inner", "no-such-export"), // nothing bound
	} {
		b.SetName(fmt.Sprintf("%s-%d", b.GetName(), i))
		if err := x.bindings.Add(b); err != nil {
			t.Fatal(err)
		}
	}
	inner := apis.ExportName{Path: "root:org:inner", Name: "databases"}
	for _, c := range []struct {
		tree logicalcluster.Name
		want map[apis.ExportName][]logicalcluster.Name
	}{
		{"root:org", map[apis.ExportName][]logicalcluster.Name{inner: {"root:team-a", "root:team-b"}}},
		{"root:org:inner", map[apis.ExportName][]logicalcluster.Name{inner: {"root:org", "root:team-a", "root:team-b"}}},
		{"root:org:inner:x", nil},
		{"root:org-2", map[apis.ExportName][]logicalcluster.Name{{Path: "root:org-2", Name: "databases"}: {"root:team-c"}}},
		{"root:lonely", nil},
		{"root:team-a", nil},
	} {
		if got := x.ConsumersOutside(c.tree); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ConsumersOutside(%s) = %v, want %v", c.tree, got, c.want)
		}
	}
	// root:org's own export "top" is bound only from inside: deleting
	// root:org:inner:x alone would not touch it, and neither counts.
	if got := x.ConsumersOutside("root:org")[apis.ExportName{Path: "root:org", Name: "top"}]; got != nil {
		t.Errorf("an export bound only from inside the tree counts: %v", got)
	}
}
