package garbagecollector

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
