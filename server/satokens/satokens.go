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

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Getter implements serviceaccount.ServiceAccountTokenGetter. It answers
// once SetLoopback has been called (from a post-start hook); before that,
// tokens do not validate.
type Getter struct {
	loopback atomic.Pointer[rest.Config]
}

// New returns a getter.
func New() *Getter { return &Getter{} }

// TokenGetterFunc adapts the getter to the upstream option
// (Authentication.ServiceAccounts.OptionalTokenGetter).
func (g *Getter) TokenGetterFunc() func(informers.SharedInformerFactory) serviceaccount.ServiceAccountTokenGetter {
	return func(informers.SharedInformerFactory) serviceaccount.ServiceAccountTokenGetter { return g }
}

// SetLoopback gives the getter the server's loopback client config.
func (g *Getter) SetLoopback(cfg *rest.Config) { g.loopback.Store(rest.CopyConfig(cfg)) }

func (g *Getter) client(ctx context.Context) (kubernetes.Interface, error) {
	cfg := g.loopback.Load()
	if cfg == nil {
		return nil, apierrors.NewServiceUnavailable("service-account token validation is not ready yet")
	}
	cluster := clusterOf(ctx)
	if cluster.IsWildcard() {
		return nil, apierrors.NewForbidden(corev1.Resource("serviceaccounts"), "", nil)
	}
	return kubernetes.NewForConfig(clusterinformer.ForCluster(cfg, cluster))
}

func clusterOf(ctx context.Context) logicalcluster.Name {
	if c, ok := logicalcluster.From(ctx); ok {
		return c
	}
	return logicalcluster.Root
}

func (g *Getter) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	c, err := g.client(ctx)
	if err != nil {
		return nil, err
	}
	sa, err := c.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		record(ctx, clusterOf(ctx), sa)
	}
	return sa, err
}

func (g *Getter) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	c, err := g.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
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
