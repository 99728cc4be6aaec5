// Package serviceaccount is upstream's ServiceAccount admission, for the
// part that makes sense in a logical cluster, looked up in the pod's own
// logical cluster: a Pod created without spec.serviceAccountName gets
// "default", and a Pod whose service account does not exist in its
// workspace's namespace is refused, as on a cluster.
//
// Upstream's plugin reads service accounts through one informer of the
// whole server, so in kcp it found (or missed) service accounts of other
// logical clusters; it is turned off (server/options.go). What it also
// does, mounting an API token volume, is not done here: pods run on
// physical clusters, where the syncer mounts a token of the pod's
// ServiceAccount in its workspace (syncer/apiaccess.go).
package serviceaccount

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/ServiceAccount"

// DefaultServiceAccountName is the service account of a pod that names none.
const DefaultServiceAccountName = "default"

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
	clients atomic.Pointer[clusterinformer.Clients]
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create)}

// Register adds the plugin to a plugin registry (one instance per process).
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// Start gives the plugin the server's loopback configuration.
func Start(loopback *rest.Config) error {
	c, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	instance.clients.Store(c)
	return nil
}

var _ admission.MutationInterface = &Plugin{}
var _ admission.ValidationInterface = &Plugin{}

func pod(a admission.Attributes) (*api.Pod, bool) {
	if a.GetResource().GroupResource() != api.Resource("pods") || a.GetSubresource() != "" {
		return nil, false
	}
	p, ok := a.GetObject().(*api.Pod)
	return p, ok
}

// Admit names the default service account on a pod that names none.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if pd, ok := pod(a); ok && pd.Spec.ServiceAccountName == "" {
		pd.Spec.ServiceAccountName = DefaultServiceAccountName
		if pd.Spec.DeprecatedServiceAccount == "" {
			pd.Spec.DeprecatedServiceAccount = DefaultServiceAccountName
		}
	}
	return nil
}

// Validate refuses a pod whose service account does not exist in its
// namespace of its own logical cluster.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	pd, ok := pod(a)
	if !ok {
		return nil
	}
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster.IsWildcard() {
		return nil
	}
	clients := p.clients.Load()
	if clients == nil {
		return apierrors.NewServiceUnavailable("service account admission is starting")
	}
	name := pd.Spec.ServiceAccountName
	if name == "" {
		name = DefaultServiceAccountName
	}
	core, err := clients.Core(cluster)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if _, err := core.ServiceAccounts(a.GetNamespace()).Get(ctx, name, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return admission.NewForbidden(a, fmt.Errorf("error looking up service account %s/%s: serviceaccount %q not found", a.GetNamespace(), name, name))
		}
		return admission.NewForbidden(a, fmt.Errorf("error looking up service account %s/%s: %v", a.GetNamespace(), name, err))
	}
	return nil
}
