// Package namespacedefaults gives every namespace of every logical cluster
// its default service account and kube-root-ca.crt config map (see README.md).
package namespacedefaults

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/serveddefaults"
)

const (
	name = "kcp-namespace-defaults"
	// RootCAConfigMap is the config map every namespace gets.
	RootCAConfigMap = "kube-root-ca.crt"
	// DefaultServiceAccount is the service account every namespace gets.
	DefaultServiceAccount = "default"
)

// Controller is the informer and queue plumbing; the work is in reconciler.
type Controller struct {
	queue      workqueue.TypedRateLimitingInterface[string]
	informers  []cache.Controller
	namespaces *clusterinformer.Namespaces
	// handler hears the shared namespace informer; nil when the defaults
	// are served (a new namespace has them without a write).
	handler cache.ResourceEventHandler
	r       *reconciler
}

// NewController builds the controller on the server's shared namespace
// informer; caPEM is published as ca.crt. served says that the storage
// layer serves the defaults (storage/serveddefaults): the controller then
// writes only when one was deleted or a kube-root-ca.crt changed, and
// keeps no cache of them (it watches their changes and reads the few it
// acts on).
//
// changed reads the stored rows of a resource with the tombstones of
// deleted served defaults (embeddedkine's RangeChanged): in served mode a
// relist reads only the defaults that were changed or deleted, not every
// namespace's.
func NewController(loopback *rest.Config, caPEM string, state func(logicalcluster.Name) (exists, terminating bool), namespaces *clusterinformer.Namespaces, served bool, local *localwatch.Storages, changed clusterinformer.RangeFunc) (*Controller, error) {
	wildcard, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name), namespaces: namespaces}
	rc := wildcard.CoreV1().RESTClient()
	c.r = &reconciler{
		caPEM: caPEM,
		state: state,
		getNamespace: func(_ context.Context, cl logicalcluster.Name, ns string) (*corev1.Namespace, error) {
			o, _ := get(namespaces.Indexer(), clusterinformer.Key(cl, "", ns)).(*corev1.Namespace)
			return o, nil
		},
		clientFor: clients.Core,
	}
	c.informers = append(c.informers, namespaces.Synced())
	saSelector := fields.OneTermEqualSelector("metadata.name", DefaultServiceAccount)
	cmSelector := fields.OneTermEqualSelector("metadata.name", RootCAConfigMap)
	if served {
		c.watchServed(rc, caPEM, saSelector, cmSelector, local, changed)
		return c, nil
	}
	// Every event names a namespace to look at: the namespace itself, or the
	// namespace of a default object.
	enqueue := func(obj interface{}) {
		if k := namespaceKey(obj); k != "" {
			c.queue.Add(k)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o interface{}) { enqueue(o) }, DeleteFunc: enqueue}
	c.handler = handler
	// The caches keep what the reconciler reads: that a default exists and,
	// for a config map, whether it holds exactly the CA. A config map that
	// does shares one data map (caData): one copy of the CA, not one per
	// namespace of every cluster.
	caData := map[string]string{"ca.crt": caPEM}
	trim := func(obj interface{}) (interface{}, error) {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			return &corev1.ServiceAccount{ObjectMeta: clusterinformer.TrimmedMeta(&o.ObjectMeta)}, nil
		case *corev1.ConfigMap:
			out := &corev1.ConfigMap{ObjectMeta: clusterinformer.TrimmedMeta(&o.ObjectMeta), Data: o.Data, BinaryData: o.BinaryData}
			if holdsOnlyCA(o.Data, o.BinaryData, caPEM) {
				out.Data = caData
			}
			return out, nil
		}
		return obj, nil
	}
	run := func(resource string, selector fields.Selector, obj runtime.Object) cache.Indexer {
		lw := local.FromClient(rc, corev1.SchemeGroupVersion, resource, selector)
		indexer, ctrl := clusterinformer.NewTrimmed(lw, obj, nil, handler, trim)
		c.informers = append(c.informers, ctrl)
		return indexer
	}
	sas := run("serviceaccounts", saSelector, &corev1.ServiceAccount{})
	cms := run("configmaps", cmSelector, &corev1.ConfigMap{})
	c.r.getServiceAccount = func(_ context.Context, cl logicalcluster.Name, ns string) (*corev1.ServiceAccount, error) {
		o, _ := get(sas, clusterinformer.Key(cl, ns, DefaultServiceAccount)).(*corev1.ServiceAccount)
		return o, nil
	}
	c.r.getConfigMap = func(_ context.Context, cl logicalcluster.Name, ns string) (*corev1.ConfigMap, error) {
		o, _ := get(cms, clusterinformer.Key(cl, ns, RootCAConfigMap)).(*corev1.ConfigMap)
		return o, nil
	}
	return c, nil
}

func get(ix cache.Indexer, key string) interface{} {
	obj, ok, _ := ix.GetByKey(key)
	if !ok {
		return nil
	}
	return obj
}

// namespaceKey names the namespace an event is about: the namespace
// itself, or the namespace of a default object.
func namespaceKey(obj interface{}) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		return clusterinformer.Key(clusterinformer.ClusterOf(o), "", o.Name)
	case *corev1.ServiceAccount:
		return clusterinformer.Key(clusterinformer.ClusterOf(o), "", o.Namespace)
	case *corev1.ConfigMap:
		return clusterinformer.Key(clusterinformer.ClusterOf(o), "", o.Namespace)
	}
	return ""
}

// watchServed watches the defaults without caching them: every namespace
// has them (served) until one is deleted or a kube-root-ca.crt is
// changed, which is all the controller needs to hear of. A (re)list reads
// only the stored rows (listingChanged): the namespaces of a tombstone or
// of a wrong kube-root-ca.crt are looked at. The reconciler reads what it
// acts on from the API.
func (c *Controller) watchServed(rc rest.Interface, caPEM string, saSelector, cmSelector fields.Selector, local *localwatch.Storages, changed clusterinformer.RangeFunc) {
	enqueue := func(obj interface{}) {
		if k := namespaceKey(obj); k != "" {
			c.queue.Add(k)
		}
	}
	wrongCA := func(obj interface{}) bool {
		cm, ok := obj.(*corev1.ConfigMap)
		return ok && !holdsOnlyCA(cm.Data, cm.BinaryData, caPEM)
	}
	sas := &changes{onDelete: enqueue}
	cms := &changes{
		onChange: func(obj interface{}) {
			if wrongCA(obj) {
				enqueue(obj)
			}
		},
		onDelete: enqueue,
	}
	// A (re)list reads the stored rows only: a deleted default is a
	// tombstone there, a changed kube-root-ca.crt a row of its own. Every
	// other namespace has its defaults, served.
	saLW := listingChanged(changed, local.FromClientAs(rc, corev1.SchemeGroupVersion, "serviceaccounts", saSelector, serviceAccountKey),
		"serviceaccounts", DefaultServiceAccount, func(ns string, value []byte) {
			if serveddefaults.IsTombstone(value) {
				c.queue.Add(ns)
			}
		})
	cmLW := listingChanged(changed, local.FromClientAs(rc, corev1.SchemeGroupVersion, "configmaps", cmSelector, configMapCA(caPEM)),
		"configmaps", RootCAConfigMap, func(ns string, value []byte) {
			if serveddefaults.IsTombstone(value) || storedWrongCA(value, caPEM) {
				c.queue.Add(ns)
			}
		})
	c.informers = append(c.informers,
		newWatchOnly(saLW, &corev1.ServiceAccount{}, sas),
		newWatchOnly(cmLW, &corev1.ConfigMap{}, cms))
	// A default deleted right after its namespace was created may be heard
	// of before the shared namespace informer has the namespace (the
	// informer-based mode looks again when it does; this one hears of no
	// namespace): ask the API.
	cached := c.r.getNamespace
	c.r.getNamespace = func(ctx context.Context, cl logicalcluster.Name, name string) (*corev1.Namespace, error) {
		if ns, err := cached(ctx, cl, name); ns != nil || err != nil {
			return ns, err
		}
		return readLive(c.r.clientFor, cl, func(client corev1client.CoreV1Interface) (*corev1.Namespace, error) {
			return client.Namespaces().Get(ctx, name, metav1.GetOptions{})
		})
	}
	c.r.getServiceAccount = func(ctx context.Context, cl logicalcluster.Name, ns string) (*corev1.ServiceAccount, error) {
		return readLive(c.r.clientFor, cl, func(client corev1client.CoreV1Interface) (*corev1.ServiceAccount, error) {
			return client.ServiceAccounts(ns).Get(ctx, DefaultServiceAccount, metav1.GetOptions{})
		})
	}
	c.r.getConfigMap = func(ctx context.Context, cl logicalcluster.Name, ns string) (*corev1.ConfigMap, error) {
		return readLive(c.r.clientFor, cl, func(client corev1client.CoreV1Interface) (*corev1.ConfigMap, error) {
			return client.ConfigMaps(ns).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
		})
	}
}

// serviceAccountKey is the controller's copy of a stored service account
// (watched in process): what namespaceKey reads of it (its namespace and
// cluster), its name, and the resourceVersion its watch resumes from. The
// watch only tells the controller which namespace lost its default, so
// nothing else of the object (secrets, labels, the rest of its metadata)
// is copied; the storage's object is only read.
func serviceAccountKey(obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	return &corev1.ServiceAccount{ObjectMeta: clusterinformer.TrimmedMetaOf(m)}, nil
}

// holdsOnlyCA says whether a kube-root-ca.crt config map's data is what
// the controller publishes: the key ca.crt with caPEM, and nothing else,
// no binary data either (the reconciler puts any other content right).
func holdsOnlyCA(data map[string]string, binary map[string][]byte, caPEM string) bool {
	return len(data) == 1 && data["ca.crt"] == caPEM && len(binary) == 0
}

// configMapCA makes the copy of a kube-root-ca.crt config map (watched in
// process) that watchServed reads: its identity (as serviceAccountKey)
// and its data, which wrongCA checks. A config map that holds just the
// expected CA shares one data map with all others like it (read only, as
// all of the watch's objects are); any other gets copies of its data. The
// storage's object is only read: the copy is not a converted deep copy of
// the whole object (one per namespace at a restart, with the whole CA).
func configMapCA(caPEM string) localwatch.Convert {
	caData := map[string]string{"ca.crt": caPEM}
	return func(obj runtime.Object) (runtime.Object, error) {
		if c, ok := obj.(runtime.CacheableObject); ok {
			obj = c.GetObject() // a watch event's object, wrapped for its serialization cache
		}
		cm, ok := obj.(*core.ConfigMap)
		if !ok {
			return nil, fmt.Errorf("the config maps' storage holds a %T", obj)
		}
		out := &corev1.ConfigMap{ObjectMeta: clusterinformer.TrimmedMetaOf(cm)}
		if holdsOnlyCA(cm.Data, cm.BinaryData, caPEM) {
			out.Data = caData
			return out, nil
		}
		out.Data = maps.Clone(cm.Data)
		if cm.BinaryData != nil {
			out.BinaryData = make(map[string][]byte, len(cm.BinaryData))
			for k, v := range cm.BinaryData {
				out.BinaryData[k] = bytes.Clone(v)
			}
		}
		return out, nil
	}
}

// readLive reads one object of cluster cl through the API; nil if there
// is none.
func readLive[T any](clientFor func(logicalcluster.Name) (corev1client.CoreV1Interface, error), cl logicalcluster.Name,
	read func(corev1client.CoreV1Interface) (*T, error)) (*T, error) {
	client, err := clientFor(cl)
	if err != nil {
		return nil, err
	}
	obj, err := read(client)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if c.handler != nil {
		c.namespaces.AddEventHandlerUntil(ctx, c.handler)
	}
	worker.Run(ctx, name, c.queue, workers, c.informers, func(ctx context.Context, key string) (time.Duration, error) {
		cl, _, ns, err := clusterinformer.SplitKey(key)
		if err != nil {
			return 0, nil
		}
		return 0, c.r.reconcile(ctx, cl, ns)
	})
}
