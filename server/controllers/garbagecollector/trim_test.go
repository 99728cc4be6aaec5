package garbagecollector

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestTrim: the collector's cache keeps what it acts on (identity, owners,
// finalizers, deletion) and the cluster, and nothing else; objects of one
// cluster share one annotation map.
func TestTrim(t *testing.T) {
	c := &Controller{}
	now := metav1.Now()
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "rs", Namespace: "ns", UID: "u1", ResourceVersion: "7", DeletionTimestamp: &now,
		Finalizers:      []string{metav1.FinalizerOrphanDependents},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u0"}},
		Labels:          map[string]string{"app": "x"},
		Annotations:     map[string]string{logicalcluster.Annotation: "root:a", "note": "big"},
	}}
	got, _ := c.trim(in)
	m := got.(*metav1.PartialObjectMetadata)
	if m.Name != "rs" || m.Namespace != "ns" || m.UID != "u1" || m.ResourceVersion != "7" || m.DeletionTimestamp == nil ||
		!reflect.DeepEqual(m.Finalizers, in.Finalizers) || !reflect.DeepEqual(m.OwnerReferences, in.OwnerReferences) {
		t.Errorf("trimmed object lost what the collector reads: %+v", m.ObjectMeta)
	}
	if m.Labels != nil || len(m.Annotations) != 1 || m.Annotations[logicalcluster.Annotation] != "root:a" {
		t.Errorf("trimmed object keeps labels %v and annotations %v, want only the cluster", m.Labels, m.Annotations)
	}
	// (The first object of a content keeps its own map; from the second
	// on, the map is shared: package sharedmaps.)
	trimmed := func() map[string]string {
		o, _ := c.trim(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "cm",
			Annotations: map[string]string{logicalcluster.Annotation: "root:a"}}})
		return o.(*metav1.PartialObjectMetadata).Annotations
	}
	if x, y := trimmed(), trimmed(); reflect.ValueOf(x).UnsafePointer() != reflect.ValueOf(y).UnsafePointer() {
		t.Error("objects of one cluster do not share the annotation map")
	}
	b, _ := c.trim(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "cm",
		Annotations: map[string]string{logicalcluster.Annotation: "root:b"}}})
	if b.(*metav1.PartialObjectMetadata).Annotations[logicalcluster.Annotation] != "root:b" {
		t.Error("an object of another cluster got the first cluster's annotations")
	}
}

// TestTrimmedCopy: an object of the API server's storage becomes the
// collector's trimmed metadata directly: what trim keeps, as copies (the
// storage's object does not change when the copy does), the cluster's
// shared annotation map, and nothing trim would drop; trimStored then
// leaves it as it is, and trims the rows listed before the watch.
func TestTrimmedCopy(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "9", DeletionTimestamp: &now, Generation: 3,
		CreationTimestamp: now, Finalizers: []string{"f"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u0"}},
		Labels:          map[string]string{"app": "x"},
		Annotations:     map[string]string{logicalcluster.Annotation: "root:a", "note": "big"},
	}}
	before := pod.DeepCopy()
	got, err := trimmedCopy(corev1.SchemeGroupVersion.WithKind("Pod"))(pod)
	if err != nil {
		t.Fatal(err)
	}
	m := got.(*metav1.PartialObjectMetadata)
	if m.APIVersion != "v1" || m.Kind != "Pod" || m.Name != "p" || m.Namespace != "ns" || m.UID != "u1" || m.ResourceVersion != "9" ||
		m.DeletionTimestamp == nil || !reflect.DeepEqual(m.Finalizers, pod.Finalizers) || !reflect.DeepEqual(m.OwnerReferences, pod.OwnerReferences) {
		t.Errorf("the copy lost what the collector reads: %+v", m)
	}
	if m.Labels != nil || len(m.Annotations) != 1 || m.Annotations[logicalcluster.Annotation] != "root:a" ||
		!m.CreationTimestamp.IsZero() || m.Generation != 0 {
		t.Errorf("the copy keeps what trim drops: %+v", m.ObjectMeta)
	}
	m.Finalizers[0] = "changed"
	m.OwnerReferences[0].Name = "changed"
	m.DeletionTimestamp.Time = now.Add(time.Hour)
	if !reflect.DeepEqual(pod, before) {
		t.Error("changing the copy changed the storage's object")
	}
	c := &Controller{}
	if again, _ := c.trimStored(got); again != got {
		t.Error("trimStored copied an object that trimmedCopy had trimmed")
	}
	row := &unstructured.Unstructured{}
	row.SetName("cm")
	row.SetLabels(map[string]string{"app": "x"})
	row.SetAnnotations(map[string]string{logicalcluster.Annotation: "root:a"})
	if r, _ := c.trimStored(row); r.(*metav1.PartialObjectMetadata).Labels != nil || r.(*metav1.PartialObjectMetadata).Name != "cm" {
		t.Errorf("trimStored did not trim a listed row: %+v", r)
	}
}
