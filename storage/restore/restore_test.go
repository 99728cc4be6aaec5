package restore

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestParseKey(t *testing.T) {
	for key, want := range map[string]Key{
		"/registry/core/configmaps/root:a/apps/cm":                            {Group: "core", Resource: "configmaps", Namespace: "apps", Name: "cm"},
		"/registry/core/namespaces/root:a/apps":                               {Group: "core", Resource: "namespaces", Name: "apps"},
		"/registry/example.com/widgets:abc123/root:a/apps/w1":                 {Group: "example.com", Resource: "widgets", Namespace: "apps", Name: "w1"},
		"/registry/apiextensions.k8s.io/customresourcedefinitions/root:a/w.x": {Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "w.x"},
	} {
		if got := ParseKey(key); got != want {
			t.Errorf("ParseKey(%s) = %+v, want %+v", key, got, want)
		}
	}
}

func obj(uid string, owners ...string) []byte {
	refs := []map[string]string{}
	for _, o := range owners {
		refs = append(refs, map[string]string{"uid": o})
	}
	v, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "ownerReferences": refs, "annotations": map[string]string{"kcp.io/cluster": "root:a"}}})
	return v
}

// Writes come CRDs first, then namespaces, then owners before what they
// own; deletions last, owned objects first.
func TestOrder(t *testing.T) {
	changes := []Change{
		{Key: "/registry/core/pods/root:a/ns/p", Action: Create, Value: obj("p", "rs")},
		{Key: "/registry/apps/replicasets/root:a/ns/rs", Action: Create, Value: obj("rs", "d")},
		{Key: "/registry/apps/deployments/root:a/ns/d", Action: Update, Value: obj("d")},
		{Key: "/registry/core/namespaces/root:a/ns", Action: Create, Value: obj("ns")},
		{Key: "/registry/core/namespaces/root:a/gone", Action: Delete},
		{Key: "/registry/core/configmaps/root:a/gone/cm", Action: Delete},
		{Key: "/registry/apiextensions.k8s.io/customresourcedefinitions/root:a/w.x", Action: Create, Value: obj("crd")},
	}
	order(changes)
	var got []string
	for _, ch := range changes {
		k := ParseKey(ch.Key)
		got = append(got, string(ch.Action)+" "+k.Resource+"/"+k.Name)
	}
	want := "create customresourcedefinitions/w.x,create namespaces/ns,update deployments/d,create replicasets/rs,create pods/p,delete configmaps/cm,delete namespaces/gone"
	if strings.Join(got, ",") != want {
		t.Errorf("order:\n got %s\nwant %s", strings.Join(got, ","), want)
	}
}

func TestMoveObject(t *testing.T) {
	into := logicalcluster.Name("root:b")
	v, err := moveObject(obj("u1", "u2"), into)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Metadata struct {
			UID             string            `json:"uid"`
			Annotations     map[string]string `json:"annotations"`
			OwnerReferences []struct {
				UID string `json:"uid"`
			} `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(v, &m); err != nil {
		t.Fatal(err)
	}
	if m.Metadata.UID != MovedUID(into, "u1") || m.Metadata.UID == "u1" || m.Metadata.OwnerReferences[0].UID != MovedUID(into, "u2") {
		t.Errorf("UIDs not moved consistently: %s", v)
	}
	if m.Metadata.Annotations[ClusterAnnotation] != "root:b" {
		t.Errorf("cluster annotation = %q", m.Metadata.Annotations[ClusterAnnotation])
	}
	if MovedUID(into, "u1") == MovedUID("root:c", "u1") {
		t.Errorf("two copies share a UID")
	}
	if k, ok := moveKey("/registry/core/configmaps/root:a/ns/cm", "root:a", into); !ok || k != "/registry/core/configmaps/root:b/ns/cm" {
		t.Errorf("moveKey = %q, %v", k, ok)
	}
	if _, ok := moveKey("/registry/core/configmaps/root:c/ns/cm", "root:a", into); ok {
		t.Errorf("a key of another cluster was moved")
	}
}

type recorder struct {
	mu     sync.Mutex
	writes []string
	stale  map[string]bool
}

func (r *recorder) note(op, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, op+" "+key)
	return !r.stale[key]
}
func (r *recorder) CreateRow(_ context.Context, key string, _ []byte) (bool, error) {
	return r.note("create", key), nil
}
func (r *recorder) UpdateRow(_ context.Context, key string, _ []byte, _ int64) (bool, error) {
	return r.note("update", key), nil
}
func (r *recorder) DeleteRow(_ context.Context, key string, _ int64) (bool, error) {
	return r.note("delete", key), nil
}

// Apply finishes a stage before the next begins and reports writes that
// found their key changed.
func TestApplyStages(t *testing.T) {
	var changes []Change
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		changes = append(changes, Change{Key: "/registry/core/configmaps/root:a/ns/" + n, Action: Create, Value: obj(n)})
	}
	changes = append(changes, Change{Key: "/registry/core/namespaces/root:a/ns", Action: Create, Value: obj("ns")},
		Change{Key: "/registry/core/namespaces/root:a/old", Action: Delete})
	order(changes)
	r := &recorder{stale: map[string]bool{"/registry/core/configmaps/root:a/ns/c": true}}
	calls := 0
	done, moved, err := Apply(context.Background(), r, &Plan{Changes: changes}, func(d, total int) { calls++ })
	if err != nil || done != 11 || len(moved) != 1 || calls != 12 {
		t.Fatalf("Apply = %d, %v, %v (%d progress calls)", done, moved, err, calls)
	}
	if r.writes[0] != "create /registry/core/namespaces/root:a/ns" || r.writes[len(r.writes)-1] != "delete /registry/core/namespaces/root:a/old" {
		t.Errorf("stages out of order: %v", r.writes)
	}
}
