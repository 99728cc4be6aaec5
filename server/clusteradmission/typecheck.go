package clusteradmission

import (
	"context"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	applyv1 "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
)

const typeCheckName = "kcp-admission-policy-status"

// TypeCheckController writes status.typeChecking of every
// ValidatingAdmissionPolicy of every logical cluster, as upstream's
// controller of the same purpose does in one cluster: each policy's
// expressions are checked against the schemas of the kinds it matches, as
// the policy's own cluster serves them (its OpenAPI, so its CRDs too), and
// the warnings are written with the generation they describe.
type TypeCheckController struct {
	clients  *clusterinformer.Clients
	indexer  cache.Indexer
	informer cache.Controller
	queue    workqueue.TypedRateLimitingInterface[string]
}

// NewTypeCheckController watches the policies of all clusters through
// loopback.
func NewTypeCheckController(loopback *rest.Config) (*TypeCheckController, error) {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	all, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	c := &TypeCheckController{clients: clients, queue: worker.NewQueue[string](typeCheckName)}
	policies := all.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	enqueue := func(obj interface{}) {
		if k, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(k)
		}
	}
	c.indexer, c.informer = clusterinformer.New(clusterinformer.ListWatch(policies.List, policies.Watch),
		&admissionregistrationv1.ValidatingAdmissionPolicy{}, nil, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj interface{}) { enqueue(obj) },
			UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
		})
	return c, nil
}

// Run processes policies with workers until ctx ends.
func (c *TypeCheckController) Run(ctx context.Context, workers int) {
	worker.Run(ctx, typeCheckName, c.queue, workers, []cache.Controller{c.informer}, c.process)
}

func (c *TypeCheckController) process(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := c.indexer.GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	policy := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if policy.Generation <= policy.Status.ObservedGeneration {
		return 0, nil
	}
	cluster, _, _, err := clusterinformer.SplitKey(key)
	if err != nil {
		return 0, nil
	}
	disco, err := c.clients.Discovery(cluster)
	if err != nil {
		return 0, err
	}
	checker := &validating.TypeChecker{
		SchemaResolver: &resolver.ClientDiscoveryResolver{Discovery: disco},
		RestMapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco)),
	}
	warnings := checker.Check(policy)
	applied := make([]*applyv1.ExpressionWarningApplyConfiguration, 0, len(warnings))
	for _, w := range warnings {
		applied = append(applied, applyv1.ExpressionWarning().WithFieldRef(w.FieldRef).WithWarning(w.Warning))
	}
	client, err := c.clients.Admissionregistration(cluster)
	if err != nil {
		return 0, err
	}
	_, err = client.ValidatingAdmissionPolicies().ApplyStatus(ctx,
		applyv1.ValidatingAdmissionPolicy(policy.Name).WithStatus(applyv1.ValidatingAdmissionPolicyStatus().
			WithObservedGeneration(policy.Generation).
			WithTypeChecking(applyv1.TypeChecking().WithExpressionWarnings(applied...))),
		metav1.ApplyOptions{FieldManager: typeCheckName, Force: true})
	return 0, err
}
