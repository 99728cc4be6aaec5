package logicalclusters

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func lc(cluster, phase, owner string, objects int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "LogicalCluster",
		"metadata": map[string]interface{}{"name": tenancy.LogicalClusterName, "annotations": map[string]interface{}{
			logicalcluster.Annotation: cluster, tenancy.OwnerAnnotation: owner,
		}},
		"status": map[string]interface{}{"phase": phase},
	}}
	if objects > 0 {
		u.Object["spec"] = map[string]interface{}{"limits": map[string]interface{}{"objects": objects}}
	}
	return u
}

// The registry's compact entries answer what the whole objects did.
func TestRegistryEntries(t *testing.T) {
	ix := cache.NewIndexer(clusterinformer.KeyFunc, cache.Indexers{})
	for _, u := range []*unstructured.Unstructured{
		lc("root:a", tenancy.PhaseReady, `{"username":"alice","groups":["x"]}`, 0),
		lc("root:b", tenancy.PhaseTerminating, `not json`, 7),
	} {
		e, err := trim(u)
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Add(e); err != nil {
			t.Fatalf("adding %T: %v", e, err)
		}
	}
	r := New()
	r.indexer.Store(&ix)
	if ex, term := r.State("root:a"); !ex || term || r.Owner("root:a") != "alice" || r.Limits("root:a") != (tenancy.Limits{}) {
		t.Errorf("root:a: exists %v terminating %v owner %q limits %+v", ex, term, r.Owner("root:a"), r.Limits("root:a"))
	}
	if ex, term := r.State("root:b"); !ex || !term || r.Exists("root:b") || r.Owner("root:b") != "" || r.Limits("root:b").Objects != 7 {
		t.Errorf("root:b: exists %v terminating %v owner %q limits %+v", ex, term, r.Owner("root:b"), r.Limits("root:b"))
	}
	if ex, _ := r.State("root:c"); ex {
		t.Error("root:c exists")
	}
	if got := len(r.Names()); got != 3 {
		t.Errorf("Names: %d, want root and two", got)
	}
}
