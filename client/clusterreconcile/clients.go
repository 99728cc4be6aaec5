package clusterreconcile

import (
	"container/list"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// DefaultClientCacheSize is how many clusters' clients Clients keeps.
const DefaultClientCacheSize = 1024

// Clients hands out controller-runtime clients aimed at one logical cluster
// each (https://host/clusters/<name>). They share one HTTP client, so
// connections are shared too; each keeps its own REST mapper because every
// cluster serves its own CRDs. The clients of the most recently used
// clusters are kept, so a reconciler that asks for one per request does
// not rediscover a cluster's APIs each time, while the memory stays
// bounded however many clusters there are.
type Clients struct {
	cfg  *rest.Config
	opts client.Options
	size int

	mu    sync.Mutex
	byKey map[logicalcluster.Name]*list.Element
	lru   *list.List // of *entry, most recent first
}

type entry struct {
	cluster logicalcluster.Name
	client  client.Client
}

// NewClients returns Clients for the server cfg points at (at the server or
// at any one cluster). opts are passed to client.New for every cluster;
// opts.HTTPClient defaults to one built from cfg and shared. Pass the
// manager's scheme (mgr.GetScheme()) for your own types.
func NewClients(cfg *rest.Config, opts client.Options) (*Clients, error) {
	if opts.HTTPClient == nil {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		opts.HTTPClient = hc
	}
	return &Clients{cfg: rest.CopyConfig(cfg), opts: opts, size: DefaultClientCacheSize,
		byKey: map[logicalcluster.Name]*list.Element{}, lru: list.New()}, nil
}

// HTTPClient is the HTTP client every cluster's client uses.
func (c *Clients) HTTPClient() *http.Client { return c.opts.HTTPClient }

// Cluster returns the client of one logical cluster.
func (c *Clients) Cluster(cluster logicalcluster.Name) (client.Client, error) {
	c.mu.Lock()
	if e, ok := c.byKey[cluster]; ok {
		c.lru.MoveToFront(e)
		cl := e.Value.(*entry).client
		c.mu.Unlock()
		return cl, nil
	}
	c.mu.Unlock()

	// client.New does no I/O (its REST mapper discovers lazily), so
	// building outside the lock costs little even when two callers race.
	cl, err := client.New(c.Config(cluster), c.opts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[cluster]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*entry).client, nil
	}
	c.byKey[cluster] = c.lru.PushFront(&entry{cluster: cluster, client: cl})
	for c.lru.Len() > c.size {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.byKey, oldest.Value.(*entry).cluster)
	}
	return cl, nil
}

// Config returns a copy of the rest.Config aimed at cluster, for clients of
// other kinds (client-go typed or dynamic clients).
func (c *Clients) Config(cluster logicalcluster.Name) *rest.Config {
	return clusterinformer.ForCluster(c.cfg, cluster)
}
