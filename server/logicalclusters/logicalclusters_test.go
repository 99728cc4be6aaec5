package logicalclusters

import (
	"context"
	"reflect"
	"strconv"
	"strings"
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

// A cluster is frozen by its LogicalCluster's spec.frozen or by the restore
// annotation, which comes first; root and unknown clusters never are.
func TestRegistryFrozen(t *testing.T) {
	ix := cache.NewIndexer(clusterinformer.KeyFunc, cache.Indexers{})
	frozen := lc("root:f", tenancy.PhaseReady, "", 0)
	frozen.Object["spec"] = map[string]interface{}{"frozen": map[string]interface{}{"reason": "incident 4711"}}
	restored := lc("root:org:r", tenancy.PhaseReady, "", 0)
	restored.Object["spec"] = map[string]interface{}{"frozen": map[string]interface{}{"reason": "incident 4711"}}
	restored.SetAnnotations(map[string]string{logicalcluster.Annotation: "root:org:r", tenancy.RestoreAnnotation: "undo-1"})
	for _, u := range []*unstructured.Unstructured{lc("root:a", tenancy.PhaseReady, "", 0), frozen, restored} {
		e, _ := trim(u)
		if err := ix.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	r := New()
	r.indexer.Store(&ix)
	for c, want := range map[logicalcluster.Name]string{
		"root": "", "root:a": "", "root:unknown": "",
		"root:f":     "incident 4711",
		"root:org:r": "being restored by WorkspaceRestore undo-1 in root:org",
	} {
		reason, ok := r.Frozen(c)
		if reason != want || ok != (want != "") {
			t.Errorf("Frozen(%s) = %q, %v; want %q", c, reason, ok, want)
		}
	}
	if f := r.FreezeOf("root:org:r"); f.Reason != "incident 4711" || f.Restore != "undo-1" {
		t.Errorf("FreezeOf(root:org:r) = %+v", f)
	}
}

// A LogicalCluster read straight from the datastore (listStored) gives the
// registry the same entry as the object the API server serves, stored
// fields and all; the list carries the revision it was read at; a row
// that is not a LogicalCluster fails the list, naming its key.
func TestListStored(t *testing.T) {
	rows := map[string]string{
		"/registry/tenancy.kcp.io/logicalclusters/root:a/cluster": `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"LogicalCluster",
			"metadata":{"name":"cluster","uid":"u-a","creationTimestamp":"2026-11-26T10:00:00Z",
			"annotations":{"kcp.io/cluster":"root:a","` + tenancy.OwnerAnnotation + `":"{\"username\":\"alice\"}","other":"x"},
			"managedFields":[{"manager":"kcp","operation":"Update","fieldsV1":{"f:spec":{"f:owner":{}}}}]},
			"spec":{"owner":{"cluster":"root","name":"a","uid":"w-a"},"limits":{"objects":100,"bytes":2048}},
			"status":{"phase":"Ready","URL":"https://kcp/clusters/root:a"}}`,
		"/registry/tenancy.kcp.io/logicalclusters/root:b/cluster": `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"LogicalCluster",
			"metadata":{"name":"cluster","uid":"u-b","annotations":{"kcp.io/cluster":"root:b","` + tenancy.RestoreAnnotation + `":"undo"}},
			"spec":{"owner":{"cluster":"root","name":"b","uid":"w-b"},"frozen":{"reason":"incident"}},"status":{"phase":"Terminating"}}`,
	}
	order := []string{"/registry/tenancy.kcp.io/logicalclusters/root:a/cluster", "/registry/tenancy.kcp.io/logicalclusters/root:b/cluster"}
	revs := map[string]int64{order[0]: 41, order[1]: 57}
	ranged := func(_ context.Context, prefix string, fn func(string, []byte, int64) error) (int64, error) {
		if prefix != "/registry/tenancy.kcp.io/logicalclusters/" {
			t.Errorf("read prefix %q", prefix)
		}
		for _, k := range order {
			if err := fn(k, []byte(rows[k]), revs[k]); err != nil {
				return 0, err
			}
		}
		return 60, nil
	}
	list, err := listStored(context.Background(), ranged)
	if err != nil {
		t.Fatal(err)
	}
	if list.GetResourceVersion() != "60" || len(list.Items) != 2 {
		t.Fatalf("list at %q with %d items, want 60 and 2", list.GetResourceVersion(), len(list.Items))
	}
	for i, k := range order {
		served := &unstructured.Unstructured{}
		if err := served.UnmarshalJSON([]byte(rows[k])); err != nil {
			t.Fatal(err)
		}
		served.SetResourceVersion(strconv.FormatInt(revs[k], 10))
		want, _ := trim(served)
		got, _ := trim(&list.Items[i])
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: entry %+v from the datastore, %+v from the served object", k, got, want)
		}
		if list.Items[i].GetResourceVersion() != served.GetResourceVersion() || list.Items[i].GetUID() != served.GetUID() {
			t.Errorf("%s: resourceVersion %q uid %q, want %q %q", k, list.Items[i].GetResourceVersion(), list.Items[i].GetUID(),
				served.GetResourceVersion(), served.GetUID())
		}
	}
	rows[order[1]] = `{"kcp.io/deleted-default":`
	if _, err := listStored(context.Background(), ranged); err == nil || !strings.Contains(err.Error(), order[1]) {
		t.Errorf("a row that does not decode: %v, want an error naming its key", err)
	}
}
