package clusterinformer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Ref is the identity of an object in a trimmed cache that needs nothing
// else of it, or only a few fields of its own (a controller's compact
// entry embeds Ref and adds them): about 60 bytes where an unstructured
// object, even trimmed, is a kilobyte or more of nested maps. KeyFunc and
// meta.Accessor work on it (GetObjectMeta builds the metadata they read).
type Ref struct {
	Cluster   logicalcluster.Name
	Namespace string
	Name      string
}

// RefOf is the Ref of an object read across clusters.
func RefOf(m metav1.Object) Ref {
	return Ref{Cluster: ClusterOf(m), Namespace: m.GetNamespace(), Name: m.GetName()}
}

// GetObjectMeta returns metadata holding the Ref's name, namespace and
// cluster annotation (a new object each call).
func (r Ref) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name, Annotations: map[string]string{logicalcluster.Annotation: string(r.Cluster)}}
}
