// Package clusterreconcile runs controller-runtime reconcilers over every
// logical cluster at once: a Source feeds a typed work queue of Requests
// (cluster, namespace, name) from one clusterinformer.Informer on
// /clusters/*, and Clients hands out a controller-runtime client of the
// request's own cluster. Controllers built with it are ordinary manager
// Runnables: leader election, the work queue and the worker count are
// controller-runtime's. See docs/controllers.md.
package clusterreconcile

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Request names an object in one logical cluster: what a reconciler of
// every workspace is asked to reconcile.
type Request struct {
	Cluster logicalcluster.Name
	types.NamespacedName
}

// String is "<cluster>|<namespace>/<name>", the clusterinformer key.
func (r Request) String() string {
	return clusterinformer.Key(r.Cluster, r.Namespace, r.Name)
}

// Source feeds a controller from an Informer across all clusters. It
// implements controller-runtime's TypedSyncingSource[Request], so a
// controller waits for the informer's initial list before its workers start
// and fails to start, with the server's answer, when the credential may not
// read /clusters/*.
type Source[T runtime.Object] struct {
	informer *clusterinformer.Informer[T]
	requests func(T) []Request
	filter   func(T) bool
}

// NewSource enqueues every changed object of inf as its own Request.
func NewSource[T runtime.Object](inf *clusterinformer.Informer[T]) *Source[T] {
	return &Source[T]{informer: inf}
}

// NewMappedSource enqueues the Requests fn returns for every changed object
// (for example the owner of an owned object, in the object's cluster).
func NewMappedSource[T runtime.Object](inf *clusterinformer.Informer[T], fn func(T) []Request) *Source[T] {
	return &Source[T]{informer: inf, requests: fn}
}

// WithFilter makes the source ignore objects for which keep is false (an
// update is enqueued when its old or new object is kept). Deletions of
// objects whose final state is unknown are always enqueued.
func (s *Source[T]) WithFilter(keep func(T) bool) *Source[T] {
	s.filter = keep
	return s
}

// Start registers the source's handler and starts the informer (once, if
// several controllers share it) for as long as ctx, the controller's
// lifetime, lasts. The controller calls Start only once it runs, i.e. after
// the manager won leader election when that is on.
func (s *Source[T]) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[Request]) error {
	s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { s.enqueue(q, obj) },
		UpdateFunc: func(old, obj interface{}) {
			if !s.enqueue(q, obj) {
				s.enqueue(q, old)
			}
		},
		DeleteFunc: func(obj interface{}) { s.enqueue(q, obj) },
	})
	s.informer.Start(ctx)
	return nil
}

// WaitForSync waits for the informer's initial list (see
// clusterinformer.Informer.WaitForCacheSync).
func (s *Source[T]) WaitForSync(ctx context.Context) error {
	return s.informer.WaitForCacheSync(ctx)
}

func (s *Source[T]) String() string { return fmt.Sprintf("clusterreconcile.Source[%T]", *new(T)) }

// enqueue adds obj's requests to q and reports whether obj passed the filter.
func (s *Source[T]) enqueue(q workqueue.TypedRateLimitingInterface[Request], obj interface{}) bool {
	t, ok := obj.(T)
	if !ok {
		// A tombstone: the object was deleted while the watch was down.
		if c, ns, n, ok := clusterinformer.NameOf(obj); ok && s.requests == nil {
			q.Add(Request{Cluster: c, NamespacedName: types.NamespacedName{Namespace: ns, Name: n}})
		} else if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
			if t, ok := d.Obj.(T); ok && s.requests != nil {
				for _, r := range s.requests(t) {
					q.Add(r)
				}
			}
		}
		return true
	}
	if s.filter != nil && !s.filter(t) {
		return false
	}
	if s.requests != nil {
		for _, r := range s.requests(t) {
			q.Add(r)
		}
		return true
	}
	if c, ns, n, ok := clusterinformer.NameOf(t); ok {
		q.Add(Request{Cluster: c, NamespacedName: types.NamespacedName{Namespace: ns, Name: n}})
	}
	return true
}

var _ source.TypedSyncingSource[Request] = &Source[runtime.Object]{}
