package clusterinformer

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/storage/sharedmaps"
)

// Shared holds the informers that several of the server's controllers and
// admission plugins read, so that each object of every cluster is cached
// once rather than once per reader. Each informer is built and started on
// first use and runs for the server's lifetime; controllers that run only
// while their replica holds the controllers' lease add their handlers with
// AddEventHandlerUntil and wait with Synced.
// Namespaces is the shared informer of namespaces in every cluster.
type Namespaces = clusterinformer.Informer[*corev1.Namespace]

type Shared struct {
	// Local, when set, lists and watches the namespaces in process
	// (package localwatch) rather than over the loopback.
	Local *localwatch.Storages

	namespacesOnce sync.Once
	namespaces     *Namespaces
	namespacesErr  error
}

// Namespaces returns the namespaces of every cluster. serverCtx must live
// as long as the server (a post-start hook's context): the first call
// starts the informer with it.
func (s *Shared) Namespaces(serverCtx context.Context, loopback *rest.Config) (*Namespaces, error) {
	s.namespacesOnce.Do(func() {
		cs, err := kubernetes.NewForConfig(WildcardConfig(loopback))
		if err != nil {
			s.namespacesErr = err
			return
		}
		ns := cs.CoreV1().Namespaces()
		// In process, the list copies no managed fields nor labels and
		// annotations that shareNamespaceMaps would drop at once.
		lw := s.Local.Or(corev1.SchemeGroupVersion.WithResource("namespaces"), localwatch.Trimmed(corev1.SchemeGroupVersion),
			clusterinformer.ListWatch(ns.List, ns.Watch))
		s.namespaces = clusterinformer.New[*corev1.Namespace](lw, clusterinformer.WithTrim(shareNamespaceMaps))
		s.namespaces.Start(serverCtx)
	})
	return s.namespaces, s.namespacesErr
}

// shareNamespaceMaps drops a namespace's managed fields and shares its
// labels and annotations with other namespaces of equal ones (package
// sharedmaps): every cluster's "default" namespace has the same labels, and
// every namespace of a cluster the same annotations. The informer's objects
// are read-only to its readers (namespace-lifecycle admission, namespace
// deletion, namespace defaults and placement, which copies one before it
// changes it).
func shareNamespaceMaps(obj interface{}) (interface{}, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	ns.ManagedFields = nil
	ns.Labels = sharedmaps.Of(ns.Labels)
	ns.Annotations = sharedmaps.Of(ns.Annotations)
	return ns, nil
}
