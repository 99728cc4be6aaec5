package clusterstore

import (
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
)

// Stores built per logical cluster (custom resources) share one etcd
// client (one gRPC connection to the embedded kine) per datastore endpoint.
// Upstream's factory dials a new client per store, which per cluster and
// CRD would be a connection and its goroutines. kine compacts its own
// table, so these stores get no compactor of their own.
var (
	sharedMu      sync.Mutex
	sharedClients = map[string]*etcdkubernetes.Client{}
)

func sharedClient(t storagebackend.TransportConfig) (*etcdkubernetes.Client, error) {
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		return nil, fmt.Errorf("TLS to the datastore endpoint is not supported (kine is embedded)")
	}
	key := strings.Join(t.ServerList, ",")
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if c, ok := sharedClients[key]; ok {
		return c, nil
	}
	c, err := etcdkubernetes.New(clientv3.Config{
		Endpoints:            t.ServerList,
		DialTimeout:          20 * time.Second,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		// Lists of large resources across all clusters.
		MaxCallRecvMsgSize: 1 << 30,
	})
	if err != nil {
		return nil, err
	}
	sharedClients[key] = c
	return c, nil
}

// noCompactor: the stores never compact; kine does.
type noCompactor struct{}

func (noCompactor) CompactRevision() int64 { return 0 }

// newSharedStore is generic.UndecoratedStorage on the shared client.
func newSharedStore(c *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	client, err := sharedClient(c.Transport)
	if err != nil {
		return nil, nil, err
	}
	transformer := c.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	s, err := etcd3.New(client, noCompactor{}, c.Codec, newFunc, newListFunc, c.Prefix, resourcePrefix, c.GroupResource,
		transformer, c.LeaseManagerConfig, etcd3.NewDefaultDecoder(c.Codec, versioner), versioner)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return s, func() { once.Do(s.Close) }, nil
}
