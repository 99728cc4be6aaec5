package resourcequota

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/admission"
	upstream "k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	resourcequotaapi "k8s.io/apiserver/pkg/admission/plugin/resourcequota/apis/resourcequota"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/quota/v1/install"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the admission plugin is registered.
const PluginName = "kcp.io/ResourceQuota"

// Plugin charges requests against the quotas of their own cluster and
// namespace; Start gives it its informer, evaluator and controller.
type Plugin struct {
	*admission.Handler
	state atomic.Pointer[state]
}

type state struct {
	indexer    cache.Indexer
	synced     cache.InformerSynced
	clients    *clusterinformer.Clients
	evaluator  upstream.Evaluator
	controller *Controller
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}

// Register adds the plugin to a plugin registry. There is one instance
// per process, started by Start once the server runs.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// Start runs the shared watch of ResourceQuotas in all logical clusters,
// the admission evaluator and the quota controller. Every replica runs
// them: admission needs the quotas where the request arrives, and the
// controller recounts at once after the deletions this replica admitted
// (its status writes carry resourceVersions, so replicas never overwrite
// each other's counts).
func Start(ctx context.Context, loopback *rest.Config, local *localwatch.Storages) error {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	st := &state{clients: clients}
	ctrl, err := newController(st)
	if err != nil {
		return err
	}
	lw := local.FromClient(client.CoreV1().RESTClient(), corev1.SchemeGroupVersion, "resourcequotas", fields.Everything())
	indexer, informer := clusterinformer.New(lw, &corev1.ResourceQuota{}, clusterinformer.ClusterIndexers, ctrl.handler())
	st.indexer, st.synced, st.controller = indexer, informer.HasSynced, ctrl
	evals, err := evaluators(&listers{clients: clients})
	if err != nil {
		return err
	}
	st.evaluator = upstream.NewQuotaEvaluator(newAccessor(indexer, clients, ctrl.charged), install.DefaultIgnoredResources(), generic.NewRegistry(evals), nil,
		&resourcequotaapi.Configuration{}, 5, ctx.Done())
	go ctrl.Run(ctx, informer, 2)
	instance.state.Store(st)
	return nil
}

var _ admission.ValidationInterface = &Plugin{}

// Validate charges a create or update against the quotas of its cluster
// and namespace (upstream's evaluator: a request that would exceed one is
// refused with 403 and the quota's name, requested, used and limited
// amounts); a deletion has its namespace's quotas counted again shortly
// after.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	st := p.state.Load()
	cluster, ok := logicalcluster.From(ctx)
	if st == nil || !ok || a.GetNamespace() == "" {
		return nil
	}
	k := key(cluster, a.GetNamespace())
	if st.synced() {
		if objs, _ := st.indexer.ByIndex(clusterinformer.ByClusterNamespace, k); len(objs) == 0 {
			return nil
		}
	}
	if a.GetOperation() == admission.Delete {
		// The object is gone (or has its deletion timestamp) once the
		// request is through; count then, and once more when finalizers
		// may have let it go.
		st.controller.enqueueNamespace(k, time.Second)
		st.controller.enqueueNamespace(k, 10*time.Second)
		return nil
	}
	if obj := a.GetObject(); obj != nil {
		if m, err := meta.Accessor(obj); err == nil && m.GetNamespace() == "" {
			m.SetNamespace(a.GetNamespace())
		}
	}
	return st.evaluator.Evaluate(keyed{Attributes: a, key: k})
}

// keyed is a request whose namespace, for upstream's evaluator, is its
// "<cluster>|<namespace>" key.
type keyed struct {
	admission.Attributes
	key string
}

func (k keyed) GetNamespace() string { return k.key }
