package clusterstore

import (
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/apimachinery/pkg/runtime"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/utils/clock"
)

// NewClient, when set (by the server, from its embedded kine), returns an
// etcd client served in-process (embeddedkine.Kine.Client). Every store is
// then built on such a client instead of dialing kine's socket: upstream's
// store and watch cache unchanged, without gRPC between them and kine.
var NewClient func() *etcdkubernetes.Client

// Stores built per logical cluster (custom resources) share one etcd
// client per datastore endpoint (one in-process client, or one gRPC
// connection to the embedded kine). Upstream's factory dials a new client
// per store, which per cluster and CRD would be a connection and its
// goroutines. kine compacts its own table, so these stores get no
// compactor of their own.
var (
	sharedMu      sync.Mutex
	sharedClients = map[string]*etcdkubernetes.Client{}
)

func sharedClient(t storagebackend.TransportConfig) (*etcdkubernetes.Client, error) {
	key := strings.Join(t.ServerList, ",")
	if NewClient != nil {
		key = "in-process"
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if c, ok := sharedClients[key]; ok {
		return c, nil
	}
	var c *etcdkubernetes.Client
	if NewClient != nil {
		if err := checkWatchProgress(t); err != nil {
			return nil, err
		}
		c = NewClient()
	} else {
		var err error
		if c, err = dial(t); err != nil {
			return nil, err
		}
	}
	sharedClients[key] = c
	return c, nil
}

func dial(t storagebackend.TransportConfig) (*etcdkubernetes.Client, error) {
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		return nil, fmt.Errorf("TLS to the datastore endpoint is not supported (kine is embedded)")
	}
	return etcdkubernetes.New(clientv3.Config{
		Endpoints:            t.ServerList,
		DialTimeout:          20 * time.Second,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		// Lists of large resources across all clusters.
		MaxCallRecvMsgSize: 1 << 30,
	})
}

// progressChecked: upstream's storage asks each client's endpoints once
// whether they answer watch progress requests, which its watch cache needs
// to serve consistent lists; an in-process client has no endpoint to ask,
// so one client dialed to kine's socket answers for it (and stays open for
// the check's retries).
var progressChecked bool

func checkWatchProgress(t storagebackend.TransportConfig) error {
	if progressChecked {
		return nil
	}
	c, err := dial(t)
	if err != nil {
		return err
	}
	etcdfeature.DefaultFeatureSupportChecker.CheckClient(c.Ctx(), c, storage.RequestWatchProgress)
	progressChecked = true
	return nil
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
	s, err := newETCD3Store(client, noCompactor{}, c, newFunc, newListFunc, resourcePrefix)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return s, func() { once.Do(s.Close) }, nil
}

func newETCD3Store(client *etcdkubernetes.Client, compactor etcd3.Compactor, c *storagebackend.ConfigForResource,
	newFunc, newListFunc func() runtime.Object, resourcePrefix string,
) (*etcd3storeCloser, error) {
	transformer := c.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	decoder := etcd3.NewDefaultDecoder(c.Codec, versioner)
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion) {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	s, err := etcd3.New(client, compactor, c.Codec, newFunc, newListFunc, c.Prefix, resourcePrefix, c.GroupResource,
		transformer, c.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		return nil, err
	}
	var i storage.Interface = s
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion) {
		i = etcd3.NewStoreWithUnsafeCorruptObjectDeletion(i, c.GroupResource)
	}
	return &etcd3storeCloser{Interface: i, Close: s.Close}, nil
}

type etcd3storeCloser struct {
	storage.Interface
	Close func()
}

// inProcessCompactor is upstream's compactor (it writes the compaction
// revision that the watch caches trim their history by) on one in-process
// client, started once, as upstream starts one per endpoint.
var inProcessCompactor struct {
	sync.Mutex
	c etcd3.Compactor
}

func compactorFor(interval time.Duration) etcd3.Compactor {
	if interval == 0 {
		return nil
	}
	inProcessCompactor.Lock()
	defer inProcessCompactor.Unlock()
	if inProcessCompactor.c == nil {
		inProcessCompactor.c = etcd3.NewCompactor(NewClient().Client, interval, clock.RealClock{}, nil)
	}
	return inProcessCompactor.c
}

// newRawStorage is generic.NewRawStorage; with NewClient set, the store is
// built on an in-process client of its own (as upstream dials a connection
// per store), with upstream's latency metrics.
func newRawStorage(c *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	if NewClient == nil {
		return generic.NewRawStorage(c, newFunc, newListFunc, resourcePrefix)
	}
	sharedMu.Lock()
	err := checkWatchProgress(c.Transport)
	sharedMu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	client := NewClient()
	client.KV = etcd3.NewETCDLatencyTracker(client.KV)
	s, err := newETCD3Store(client, compactorFor(c.CompactionInterval), c, newFunc, newListFunc, resourcePrefix)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	var once sync.Once
	return s, func() {
		once.Do(func() {
			s.Close()
			client.Close()
		})
	}, nil
}
