package namespacedefaults

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestServiceAccountKey: the copy of a stored service account (the API
// server's internal type) that the controller's in-process watch hands on
// says which namespace of which cluster it belongs to, and carries nothing
// else of the object; the stored object is left as it was.
func TestServiceAccountKey(t *testing.T) {
	stored := &core.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns", UID: "u1", ResourceVersion: "12",
			Labels:      map[string]string{"app": "x"},
			Annotations: map[string]string{logicalcluster.Annotation: "root:a", "note": "big"}},
		Secrets: []core.ObjectReference{{Name: "token"}},
	}
	before := stored.DeepCopy()
	obj, err := serviceAccountKey(stored)
	if err != nil {
		t.Fatal(err)
	}
	sa, ok := obj.(*corev1.ServiceAccount)
	if !ok {
		t.Fatalf("got %T, want the versioned ServiceAccount the informer expects", obj)
	}
	if got, want := namespaceKey(sa), clusterinformer.Key("root:a", "", "ns"); got != want {
		t.Errorf("namespace key %q, want %q", got, want)
	}
	if sa.Name != "default" || sa.ResourceVersion != "12" || sa.UID != "u1" {
		t.Errorf("copy lost its identity: %+v", sa.ObjectMeta)
	}
	if sa.Labels != nil || len(sa.Annotations) != 1 || sa.Secrets != nil {
		t.Errorf("copy carries more than the controller reads: %+v", sa)
	}
	if !reflect.DeepEqual(stored, before) {
		t.Error("making the copy changed the stored object")
	}
}
