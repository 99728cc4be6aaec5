package boundapis

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestLocateAcrossShards: an export of a workspace of this shard is looked
// up here only (a peer's copy of the same name is never used); one of
// another shard comes from the one peer copy that holds it; two copies of
// one export (one UID: a workspace being moved) serve, two different
// exports claiming one workspace do not; a copy that has not synced makes
// a missing export unavailable, not missing.
func TestLocateAcrossShards(t *testing.T) {
	x := New(nil)
	x.exports = cache.NewIndexer(clusterinformer.KeyFunc, exportIndexers())
	x.schemas = cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)
	x.isLocal = func(c logicalcluster.Name) bool { return c == "root:here" || c == "root:here-empty" }
	synced := true
	peer := func(name string, objs ...*unstructured.Unstructured) *replica {
		r := &replica{shard: name, exports: cache.NewIndexer(clusterinformer.KeyFunc, exportIndexers()),
			schemas: cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers),
			synced:  []cache.InformerSynced{func() bool { return synced }}}
		for _, o := range objs {
			if err := r.exports.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	if err := x.exports.Add(objectIn("root:here", "databases", nil)); err != nil {
		t.Fatal(err)
	}
	moved := objectIn("root:moving", "databases", nil)
	forged := objectIn("root:claimed", "databases", nil)
	forged2 := forged.DeepCopy()
	forged2.SetUID(types.UID("another"))
	x.peers = []*replica{
		peer("a", objectIn("root:here", "databases", map[string]interface{}{"forged": true}), objectIn("root:here-empty", "databases", nil),
			objectIn("root:there", "databases", nil), moved, forged),
		peer("b", moved.DeepCopy(), forged2),
	}
	for _, c := range []struct {
		cluster, shard string
		found          bool
		err            bool
	}{
		{"root:here", "", true, false},
		{"root:here-empty", "", false, false},
		{"root:there", "a", true, false},
		{"root:moving", "a", true, false},
		{"root:claimed", "", false, true},
		{"root:nowhere", "", false, false},
	} {
		src, o, found, err := x.locate(logicalcluster.Name(c.cluster), "databases")
		if found != c.found || (err != nil) != c.err || (found && src.shard != c.shard) {
			t.Errorf("%s: found %v in %q, err %v; want found %v in %q, error %v", c.cluster, found, src.shard, err, c.found, c.shard, c.err)
		}
		if u, _ := o.(*unstructured.Unstructured); u == nil {
			continue
		} else if spec, _ := u.Object["spec"].(map[string]interface{}); c.cluster == "root:here" && spec["forged"] != nil {
			t.Errorf("root:here's export came from a peer's copy")
		}
	}
	synced = false
	var unavailable *UnavailableError
	if _, _, found, err := x.locate("root:nowhere", "databases"); found || !errors.As(err, &unavailable) {
		t.Errorf("with a peer copy not synced, a missing export: found %v err %v; want UnavailableError", found, err)
	}
	if _, _, found, err := x.locate("root:here-empty", "databases"); found || err != nil {
		t.Errorf("a missing export of a workspace here must not wait for peers: found %v err %v", found, err)
	}
}
