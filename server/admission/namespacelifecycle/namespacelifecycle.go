// Package namespacelifecycle is the cluster-aware namespace lifecycle
// admission plugin: objects can be created only in namespaces that exist in
// the request's logical cluster and are not being deleted, and the default
// namespaces cannot be deleted. Upstream's plugin reads namespaces of one
// cluster through an informer and is off; this one looks in the request's
// cluster, through one shared watch of namespaces in all clusters with a
// direct read when the watch has not caught up yet.
package namespacelifecycle

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/NamespaceLifecycle"

// immortal namespaces cannot be deleted in any logical cluster.
var immortal = sets.New(metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic)

// reviews may be posted to any namespace name: they store nothing.
var reviews = sets.New(
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"},
)

// Plugin is the admission plugin; Start gives it its informer and client.
type Plugin struct {
	*admission.Handler
	state atomic.Pointer[state]
}

type state struct {
	indexer  cache.Indexer
	synced   cache.InformerSynced
	loopback *rest.Config
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create, admission.Delete)}

// Register adds the plugin to a plugin registry. There is one instance per
// process, started by Start once the server runs.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// Start gives the plugin the server's shared namespace informer (running
// for the server's lifetime) and its loopback config.
func Start(namespaces *clusterinformer.Namespaces, loopback *rest.Config) {
	instance.state.Store(&state{indexer: namespaces.Indexer(), synced: namespaces.HasSynced, loopback: rest.CopyConfig(loopback)})
}

var _ admission.ValidationInterface = &Plugin{}

func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	if cluster.IsWildcard() {
		return nil
	}
	gr := a.GetResource().GroupResource()
	if a.GetKind().GroupKind() == corev1.SchemeGroupVersion.WithKind("Namespace").GroupKind() || gr == corev1.Resource("namespaces") {
		if a.GetOperation() == admission.Delete && a.GetSubresource() == "" && immortal.Has(a.GetName()) {
			return admission.NewForbidden(a, fmt.Errorf("namespace %s may not be deleted", a.GetName()))
		}
		return nil
	}
	if a.GetOperation() != admission.Create || a.GetNamespace() == "" || reviews.Has(gr) {
		return nil
	}
	if p.state.Load() == nil && a.GetUserInfo() != nil && a.GetUserInfo().GetName() == user.APIServerUser {
		// The server's own start-up writes, before this plugin has a client.
		return nil
	}
	ns, err := p.namespace(ctx, cluster, a.GetNamespace())
	if apierrors.IsNotFound(err) {
		return admission.NewForbidden(a, fmt.Errorf("namespace %s does not exist", a.GetNamespace()))
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if ns.Status.Phase == corev1.NamespaceTerminating || ns.DeletionTimestamp != nil {
		return apierrors.NewForbidden(gr, a.GetName(),
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", a.GetNamespace()))
	}
	return nil
}

// namespace finds a namespace in one cluster: in the shared cache, else
// (just created, or the cache is starting) with a direct read.
func (p *Plugin) namespace(ctx context.Context, cluster logicalcluster.Name, name string) (*corev1.Namespace, error) {
	st := p.state.Load()
	if st == nil {
		return nil, apierrors.NewServiceUnavailable("namespace lifecycle admission is starting")
	}
	if st.synced() {
		if obj, ok, _ := st.indexer.GetByKey(clusterinformer.Key(cluster, "", name)); ok {
			return obj.(*corev1.Namespace), nil
		}
	}
	client, err := kubernetes.NewForConfig(clusterinformer.ForCluster(st.loopback, cluster))
	if err != nil {
		return nil, err
	}
	return client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
}

// Namespace returns a namespace of one cluster from the shared cache (or a
// direct read while the cache fills): other admission plugins use it.
func Namespace(ctx context.Context, cluster logicalcluster.Name, name string) (*corev1.Namespace, error) {
	return instance.namespace(ctx, cluster, name)
}
