// Package satokens looks up the service accounts and secrets behind
// service-account tokens in the logical cluster of the request that presents
// the token. Upstream looks them up in informers of one cluster; here the
// same name in another cluster is another object with another UID, so a
// token minted in one cluster does not validate in any other. A user whose
// token was validated that way is marked as such (identity.go), since the
// name system:serviceaccount:... alone proves nothing.
package satokens

import (
	"context"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Getter implements serviceaccount.ServiceAccountTokenGetter. It answers
// once SetLoopback has been called (from a post-start hook); before that,
// tokens do not validate.
type Getter struct {
	clients atomic.Pointer[clusterinformer.Clients]
	cache   *objectCache
}

// New returns a getter.
func New() *Getter { return &Getter{cache: newObjectCache()} }

// TokenGetterFunc adapts the getter to the upstream option
// (Authentication.ServiceAccounts.OptionalTokenGetter).
func (g *Getter) TokenGetterFunc() func(informers.SharedInformerFactory) serviceaccount.ServiceAccountTokenGetter {
	return func(informers.SharedInformerFactory) serviceaccount.ServiceAccountTokenGetter { return g }
}

// Start gives the getter the server's loopback client config and runs the
// watches that keep its cache true until ctx ends.
func (g *Getter) Start(ctx context.Context, cfg *rest.Config) error {
	clients, err := clusterinformer.NewClients(cfg)
	if err != nil {
		return err
	}
	md, err := metadata.NewForConfig(clusterinformer.WildcardConfig(cfg))
	if err != nil {
		return err
	}
	root, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	go g.cache.watch(ctx, md, root, corev1.SchemeGroupVersion.WithResource("serviceaccounts"), "sa")
	go g.cache.watch(ctx, md, root, corev1.SchemeGroupVersion.WithResource("secrets"), "secret")
	g.clients.Store(clients)
	return nil
}

// cluster returns the request's cluster and the client set that reads in
// it (its clients are built only on a cache miss).
func (g *Getter) cluster(ctx context.Context) (*clusterinformer.Clients, logicalcluster.Name, error) {
	clients := g.clients.Load()
	if clients == nil {
		return nil, "", apierrors.NewServiceUnavailable("service-account token validation is not ready yet")
	}
	cluster := clusterOf(ctx)
	if cluster.IsWildcard() {
		return nil, "", apierrors.NewForbidden(corev1.Resource("serviceaccounts"), "", nil)
	}
	return clients, cluster, nil
}

func clusterOf(ctx context.Context) logicalcluster.Name {
	if c, ok := logicalcluster.From(ctx); ok {
		return c
	}
	return logicalcluster.Root
}

func (g *Getter) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	clients, cluster, err := g.cluster(ctx)
	if err != nil {
		return nil, err
	}
	sa, err := cachedGet(g.cache, cacheKey("sa", cluster, namespace, name), func() (*corev1.ServiceAccount, error) {
		c, err := clients.Core(cluster)
		if err != nil {
			return nil, err
		}
		return c.ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
	})
	if err == nil {
		record(ctx, cluster, sa)
	}
	return sa, err
}

func (g *Getter) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	clients, cluster, err := g.cluster(ctx)
	if err != nil {
		return nil, err
	}
	return cachedGet(g.cache, cacheKey("secret", cluster, namespace, name), func() (*corev1.Secret, error) {
		c, err := clients.Core(cluster)
		if err != nil {
			return nil, err
		}
		return c.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	})
}

// cachedGet answers from the cache or by get, caching what get found.
// Callers only read what they are given.
func cachedGet[T runtime.Object](c *objectCache, key string, get func() (T, error)) (T, error) {
	if obj, ok := c.get(key); ok {
		return obj.(T), nil
	}
	started, live := time.Now(), c.live.Load() == 2
	obj, err := get()
	if err == nil {
		c.put(key, obj, started, live)
	}
	return obj, err
}

// A generic control plane serves no pods and nodes.
func (g *Getter) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

func (g *Getter) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
}

func (g *Getter) GetValidatingWebhookConfiguration(ctx context.Context, name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("validatingwebhookconfigurations"), name)
}

func (g *Getter) GetMutatingWebhookConfiguration(ctx context.Context, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("mutatingwebhookconfigurations"), name)
}
