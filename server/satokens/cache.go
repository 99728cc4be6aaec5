package satokens

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/utils/lru"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// The token validator reads a token's service account (and, for legacy
// tokens, its secret) on every request. objectCache keeps what it read,
// keyed by logical cluster, namespace and name, so a busy service account
// costs a loopback GET once rather than per request. Every change of a
// cached object (an update, its deletion, its deletion timestamp) removes
// it: two watches of the metadata of all service accounts and secrets of
// all clusters say which, and hold nothing themselves (memory is the
// cache's bounded size). While those watches are not running (before the
// first has started, after one failed and until it is restarted) nothing is
// cached and nothing is served from the cache.

// CacheSize bounds the cached service accounts and secrets.
const CacheSize = 10000

// CacheTTL bounds how long an object is served from the cache even if no
// change of it is seen (a safety net; changes remove it at once).
const CacheTTL = 5 * time.Minute

type cached struct {
	obj     runtime.Object
	fetched time.Time
}

type objectCache struct {
	mu    sync.Mutex
	lru   *lru.Cache
	stale map[string]time.Time // keys changed recently: a GET begun before then must not be cached
	live  atomic.Int32         // running watches; the cache is used only when both run

}

// lookups counts the cache's answers on /metrics.
var lookups = metrics.NewCounterVec(&metrics.CounterOpts{
	Name:           "kcp_serviceaccount_token_cache_lookups_total",
	Help:           "Lookups of service accounts and secrets behind service-account tokens, by whether the cache answered (hit) or a loopback GET was needed (miss).",
	StabilityLevel: metrics.ALPHA,
}, []string{"result"})

func init() { legacyregistry.MustRegister(lookups) }

func newObjectCache() *objectCache {
	return &objectCache{lru: lru.New(CacheSize), stale: map[string]time.Time{}}
}

func cacheKey(kind string, cluster logicalcluster.Name, namespace, name string) string {
	return kind + "|" + clusterinformer.Key(cluster, namespace, name)
}

// get returns the object cached under key, if the cache is live.
func (c *objectCache) get(key string) (runtime.Object, bool) {
	if c.live.Load() != 2 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.lru.Get(key)
	if !ok || time.Since(v.(cached).fetched) > CacheTTL {
		lookups.WithLabelValues("miss").Inc()
		return nil, false
	}
	lookups.WithLabelValues("hit").Inc()
	return v.(cached).obj, true
}

// put caches obj, read by a GET that began at started, unless the cache was
// not live then or the object changed since.
func (c *objectCache) put(key string, obj runtime.Object, started time.Time, liveAtStart bool) {
	if !liveAtStart || c.live.Load() != 2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.stale[key]; ok && !t.Before(started) {
		return
	}
	c.lru.Add(key, cached{obj: obj, fetched: time.Now()})
}

// changed removes key and remembers when, so a GET in flight does not
// cache the old object.
func (c *objectCache) changed(key string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key)
	c.stale[key] = now
	if len(c.stale) > 4*CacheSize {
		for k, t := range c.stale {
			if now.Sub(t) > time.Minute {
				delete(c.stale, k)
			}
		}
	}
}

func (c *objectCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Clear()
}

// watch follows changes of resource (kind names it in keys) in all clusters
// (md) until ctx ends, restarting after failures; while it is down the
// cache is not used and, when it comes back, starts empty. root is a
// client of the root cluster.
func (c *objectCache) watch(ctx context.Context, md, root metadata.Interface, resource schema.GroupVersionResource, kind string) {
	r := md.Resource(resource)
	for ctx.Err() == nil {
		// Any list gives a current resourceVersion (kine's revisions are
		// one sequence for all keys); one object of root's is enough. (A
		// page of one across every cluster read every namespace of every
		// cluster for the served service accounts: a second of the
		// datastore's time at 100,000 workspaces.)
		list, err := root.Resource(resource).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			klog.V(2).InfoS("service-account token cache: list failed; retrying", "resource", resource.Resource, "err", err)
			sleep(ctx, time.Second)
			continue
		}
		w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.AllowWatchBookmarks = true
				return r.Watch(ctx, o)
			},
		})
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		c.live.Add(1)
		c.follow(w, kind)
		c.live.Add(-1)
		c.flush()
		w.Stop()
		sleep(ctx, time.Second)
	}
}

func (c *objectCache) follow(w watch.Interface, kind string) {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			klog.V(2).InfoS("service-account token cache: watch ended; cache flushed", "kind", kind, "status", ev.Object)
			return
		case watch.Bookmark:
			continue
		}
		m, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if !ok {
			continue
		}
		cluster := clusterinformer.ClusterOf(m)
		if cluster == "" {
			continue
		}
		c.changed(cacheKey(kind, cluster, m.GetNamespace(), m.GetName()))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
