package clusterstore

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/lru"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// ListSizes remembers how many objects the last list of a resource in a
// logical cluster (and namespace, or all of them) returned. Upstream's API
// priority and fairness estimates what a list costs from the number of
// objects of its resource in the whole server, which here is every
// cluster's: a tenant's list of ten objects would be charged like a list of
// all of them, and, where that count is not kept, a list of a million like
// a get. clusterapf estimates from these sizes instead.
var ListSizes = &listSizes{lru: lru.New(100000)}

type listSizes struct {
	mu  sync.Mutex
	lru *lru.Cache
}

type listKey struct {
	cluster   logicalcluster.Name
	resource  schema.GroupResource
	namespace string
}

// Observe records that a list of resource in cluster and namespace ("":
// all) returned n objects.
func (l *listSizes) Observe(cluster logicalcluster.Name, resource schema.GroupResource, namespace string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lru.Add(listKey{cluster, resource, namespace}, n)
}

// Last returns the size of the last such list, if one is remembered.
func (l *listSizes) Last(cluster logicalcluster.Name, resource schema.GroupResource, namespace string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.lru.Get(listKey{cluster, resource, namespace})
	if !ok {
		return 0, false
	}
	return v.(int), true
}
