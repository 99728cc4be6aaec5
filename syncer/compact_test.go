package syncer

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func trimmedDeployment() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]interface{}{
			"name": "web", "namespace": "default", "uid": "u-1", "resourceVersion": "42", "generation": int64(3),
			"labels": map[string]interface{}{"app": "web"},
			"annotations": map[string]interface{}{
				logicalcluster.Annotation: "root:a", lastAppliedAnnotation: `{"big":"config"}`, "keep": "me",
			},
			"managedFields": []interface{}{map[string]interface{}{"manager": "kubectl", "operation": "Apply"}},
		},
		"spec":   map[string]interface{}{"replicas": int64(2), "paused": false, "ratio": 0.5},
		"status": map[string]interface{}{"availableReplicas": int64(1)},
	}}
}

func TestCompactKeepsWhatTheSyncerReadsAndDecodesFreshCopies(t *testing.T) {
	c, err := compact(trimmedDeployment())
	if err != nil {
		t.Fatal(err)
	}
	// Keys and indexes read the identity without decoding.
	key, err := clusterinformer.KeyFunc(c)
	if err != nil || key != clusterinformer.Key("root:a", "default", "web") {
		t.Fatalf("key %q, %v", key, err)
	}
	m, err := meta.Accessor(c)
	if err != nil || m.GetUID() != "u-1" || m.GetResourceVersion() != "42" {
		t.Fatalf("identity: %v %v", m, err)
	}
	got := object(c)
	want := trimmedDeployment()
	ann := want.GetAnnotations()
	delete(ann, lastAppliedAnnotation)
	want.SetAnnotations(ann)
	want.SetManagedFields(nil)
	if !reflect.DeepEqual(got.Object, want.Object) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", got.Object, want.Object)
	}
	// Numbers keep their types (int64 stays int64).
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); r != 2 {
		t.Fatalf("replicas %v", got.Object["spec"])
	}
	// A caller changing what it got changes nothing cached.
	_ = unstructured.SetNestedField(got.Object, int64(9), "spec", "replicas")
	if r, _, _ := unstructured.NestedInt64(object(c).Object, "spec", "replicas"); r != 2 {
		t.Fatal("a decoded copy shares state with the cache")
	}
	// Handlers: a deletion's last state unknown is decoded too.
	if d := object(cache.DeletedFinalStateUnknown{Key: key, Obj: c}); d == nil || d.GetName() != "web" {
		t.Fatalf("DeletedFinalStateUnknown: %v", d)
	}
}

func TestCompactInADownstreamIndexer(t *testing.T) {
	idx := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pod := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]interface{}{"name": "p", "namespace": "kcp-1"}, "status": map[string]interface{}{"phase": "Pending"}}}
	c, _ := compact(pod)
	if err := idx.Add(c); err != nil {
		t.Fatal(err)
	}
	o, ok, _ := idx.GetByKey("kcp-1/p")
	if !ok || object(o).GetName() != "p" || o.(*stored).phase != "Pending" {
		t.Fatalf("GetByKey: %v %v", o, ok)
	}
	if objs, _ := idx.ByIndex(cache.NamespaceIndex, "kcp-1"); len(objs) != 1 {
		t.Fatalf("ByIndex: %v", objs)
	}
}

func TestTrimProjectionKeepsOnlyIdentity(t *testing.T) {
	now := metav1.Now()
	p := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]interface{}{"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "7",
			"annotations": map[string]interface{}{logicalcluster.Annotation: "root:a", workload.DownstreamUIDAnnotation: "d-1", "other": "x"},
			"labels":      map[string]interface{}{"a": "b"}},
		"spec": map[string]interface{}{"nodeName": "n"}}}
	p.SetDeletionTimestamp(&now)
	c, _ := trimProjection(p)
	key, err := clusterinformer.KeyFunc(c)
	if err != nil || key != clusterinformer.Key("root:a", "default", "p") {
		t.Fatalf("key %q %v", key, err)
	}
	got := object(c)
	if got.GetKind() != "Pod" || got.GetUID() != "u" || got.GetResourceVersion() != "7" || got.GetDeletionTimestamp() == nil ||
		got.GetAnnotations()[workload.DownstreamUIDAnnotation] != "d-1" || clusterinformer.ClusterOf(got) != "root:a" {
		t.Fatalf("identity lost: %#v", got.Object)
	}
	if got.Object["spec"] != nil || got.GetLabels() != nil || got.GetAnnotations()["other"] != "" {
		t.Fatalf("more than the identity kept: %#v", got.Object)
	}
}

func TestTrimSecretDropsTheToken(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "n", Annotations: map[string]string{TokenRefreshAnnotation: "t"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, Data: map[string][]byte{"token": []byte("secret")}}
	o, _ := trimSecret(sec)
	got := o.(*corev1.Secret)
	if got.Data != nil || got.ManagedFields != nil || got.Annotations[TokenRefreshAnnotation] != "t" || got.Name != "s" {
		t.Fatalf("trimmed secret: %#v", got)
	}
	if sec.Data == nil {
		t.Fatal("the original was changed")
	}
}

func TestCompactKeepsWhatAnObjectNames(t *testing.T) {
	ev := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Event",
		"metadata":       map[string]interface{}{"name": "e", "namespace": "kcp-1"},
		"involvedObject": map[string]interface{}{"kind": "Deployment", "name": "web"}}}
	pod := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]interface{}{"name": "p", "namespace": "kcp-1",
			"ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "x"}}}}}
	e, _ := compact(ev)
	p, _ := compact(pod)
	if !e.(*stored).names("Deployment", "web") || e.(*stored).names("Deployment", "we") || e.(*stored).names("ReplicaSet", "web") {
		t.Fatalf("event refs %q", e.(*stored).refs)
	}
	if !p.(*stored).names("ReplicaSet", "web-1") || p.(*stored).names("ReplicaSet", "web") {
		t.Fatalf("pod refs %q", p.(*stored).refs)
	}
}
