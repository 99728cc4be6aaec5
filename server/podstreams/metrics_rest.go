package podstreams

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	metricsapi "k8s.io/metrics/pkg/apis/metrics"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// MetricsGroupVersion is what kcp serves of metrics.k8s.io in every
// workspace (kubectl top asks for it).
var MetricsGroupVersion = metricsv1beta1.SchemeGroupVersion

func init() {
	// The internal and v1beta1 types only: v1beta1 is what kcp serves.
	utilruntime.Must(metricsapi.AddToScheme(legacyscheme.Scheme))
	utilruntime.Must(metricsv1beta1.AddToScheme(legacyscheme.Scheme))
	utilruntime.Must(legacyscheme.Scheme.SetVersionPriority(metricsv1beta1.SchemeGroupVersion))
}

// MetricsProvider serves metrics.k8s.io/v1beta1 in every workspace: pods
// (PodMetrics) from the physical clusters that run the workspace's pods;
// nodes (NodeMetrics) refused, since nodes are the location's, not the
// workspace's.
type MetricsProvider struct{ S *Streams }

func (MetricsProvider) GroupName() string { return metricsapi.GroupName }

func (p MetricsProvider) NewRESTStorage(serverstorage.APIResourceConfigSource, generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info := genericapiserver.NewDefaultAPIGroupInfo(metricsapi.GroupName, legacyscheme.Scheme, legacyscheme.ParameterCodec, legacyscheme.Codecs)
	info.VersionedResourcesStorageMap[metricsv1beta1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"pods":  &podMetricsREST{s: p.S, TableConvertor: rest.NewDefaultTableConvertor(metricsapi.Resource("pods"))},
		"nodes": &nodeMetricsREST{TableConvertor: rest.NewDefaultTableConvertor(metricsapi.Resource("nodes"))},
	}
	return info, nil
}

// podMetricsREST reads PodMetrics (get and list, no watch) from the
// physical clusters.
type podMetricsREST struct {
	s *Streams
	rest.TableConvertor
}

var (
	_ rest.Getter               = &podMetricsREST{}
	_ rest.Lister               = &podMetricsREST{}
	_ rest.Scoper               = &podMetricsREST{}
	_ rest.SingularNameProvider = &podMetricsREST{}
)

func (r *podMetricsREST) New() runtime.Object     { return &metricsapi.PodMetrics{} }
func (r *podMetricsREST) NewList() runtime.Object { return &metricsapi.PodMetricsList{} }
func (r *podMetricsREST) Destroy()                {}
func (r *podMetricsREST) NamespaceScoped() bool   { return true }
func (r *podMetricsREST) GetSingularName() string { return "pod" }

// workspace is the request's workspace and namespace ("" for all).
func (r *podMetricsREST) workspace(ctx context.Context) (logicalcluster.Name, string, error) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster.IsWildcard() {
		return "", "", apierrors.NewBadRequest("pod metrics are served in one workspace")
	}
	if r.s.clients == nil {
		return "", "", apierrors.NewServiceUnavailable("pod metrics are not set up yet")
	}
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	return cluster, namespace, nil
}

// namespaces are the ones a request covers, with their targets: its own
// (which must be placed to have metrics), or all of the workspace's.
func (r *podMetricsREST) namespaces(ctx context.Context, cluster logicalcluster.Name, namespace string) ([]namespaceTargets, error) {
	if namespace != "" {
		targets, err := r.s.metricsTargets(ctx, cluster, namespace)
		if err != nil {
			return nil, err
		}
		if len(targets) == 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("metrics not available: namespace %s is not placed on any SyncTarget, so none of its pods run (a Placement selects it)", namespace))
		}
		return []namespaceTargets{{namespace, targets}}, nil
	}
	core, err := r.s.clients.Core(cluster)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	list, err := core.Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("listing namespaces: %v", err))
	}
	out := make([]namespaceTargets, 0, len(list.Items))
	for _, ns := range list.Items {
		if targets := assignedTargets(cluster, ns.Name, ns.Labels, ns.Annotations); len(targets) > 0 {
			out = append(out, namespaceTargets{ns.Name, targets})
		}
	}
	return out, nil
}

func (r *podMetricsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	cluster, namespace, err := r.workspace(ctx)
	if err != nil {
		return nil, err
	}
	if namespace == "" {
		return nil, apierrors.NewBadRequest("a namespace is required")
	}
	namespaces, err := r.namespaces(ctx, cluster, namespace)
	if err != nil {
		return nil, err
	}
	items, err := r.s.collectMetrics(ctx, namespaces, name, nil)
	if err != nil {
		return nil, err
	}
	for i := range items {
		if items[i].Name == name {
			out := &metricsapi.PodMetrics{}
			if err := metricsv1beta1.Convert_v1beta1_PodMetrics_To_metrics_PodMetrics(&items[i], out, nil); err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			return out, nil
		}
	}
	return nil, apierrors.NewNotFound(metricsapi.Resource("pods"), name)
}

func (r *podMetricsREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	cluster, namespace, err := r.workspace(ctx)
	if err != nil {
		return nil, err
	}
	if options != nil && options.Watch {
		return nil, apierrors.NewMethodNotSupported(metricsapi.Resource("pods"), "watch")
	}
	namespaces, err := r.namespaces(ctx, cluster, namespace)
	if err != nil {
		return nil, err
	}
	query := url.Values{}
	if options != nil && options.LabelSelector != nil && !options.LabelSelector.Empty() {
		query.Set("labelSelector", options.LabelSelector.String())
	}
	if options != nil && options.FieldSelector != nil && !options.FieldSelector.Empty() {
		query.Set("fieldSelector", options.FieldSelector.String())
	}
	items, err := r.s.collectMetrics(ctx, namespaces, "", query)
	if err != nil {
		return nil, err
	}
	out := &metricsapi.PodMetricsList{Items: make([]metricsapi.PodMetrics, len(items))}
	for i := range items {
		if err := metricsv1beta1.Convert_v1beta1_PodMetrics_To_metrics_PodMetrics(&items[i], &out.Items[i], nil); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	return out, nil
}

// nodeMetricsREST refuses NodeMetrics: a workspace has no nodes; the
// nodes its pods run on are the location's, shared with other tenants.
type nodeMetricsREST struct {
	rest.TableConvertor
}

var (
	_ rest.Getter = &nodeMetricsREST{}
	_ rest.Lister = &nodeMetricsREST{}
)

// NodeMetricsRefused is the answer to kubectl top nodes in a workspace.
const NodeMetricsRefused = "node metrics are not served in a workspace: the nodes its pods run on belong to the physical clusters of its location, shared with other workspaces (kubectl top pods shows this workspace's usage; the location's admins see nodes on the physical clusters)"

func refuseNodes() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed,
		Reason: metav1.StatusReasonMethodNotAllowed, Message: NodeMetricsRefused,
		Details: &metav1.StatusDetails{Group: metricsapi.GroupName, Kind: "nodes"}}}
}

func (r *nodeMetricsREST) New() runtime.Object     { return &metricsapi.NodeMetrics{} }
func (r *nodeMetricsREST) NewList() runtime.Object { return &metricsapi.NodeMetricsList{} }
func (r *nodeMetricsREST) Destroy()                {}
func (r *nodeMetricsREST) NamespaceScoped() bool   { return false }
func (r *nodeMetricsREST) GetSingularName() string { return "node" }

func (r *nodeMetricsREST) Get(context.Context, string, *metav1.GetOptions) (runtime.Object, error) {
	return nil, refuseNodes()
}

func (r *nodeMetricsREST) List(context.Context, *metainternalversion.ListOptions) (runtime.Object, error) {
	return nil, refuseNodes()
}
