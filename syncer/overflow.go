package syncer

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/workload"
)

// overflowRecheck is how often the syncer looks again at a Deployment of an
// overflow division (Placement spec.groups): what its cluster can hold of
// it changes with everything else that runs there.
const overflowRecheck = 2 * time.Second

// capacityWatch follows the physical cluster's nodes and pods, once a
// namespace with an overflow division needs them (started lazily: a
// syncer without one keeps no cache of every pod of the cluster).
type capacityWatch struct {
	client kubernetes.Interface
	once   sync.Once
	pods   corelisters.PodLister
	nodes  corelisters.NodeLister
	synced func() bool
}

func newCapacityWatch(downstream *rest.Config) (*capacityWatch, error) {
	c, err := kubernetes.NewForConfig(downstream)
	if err != nil {
		return nil, err
	}
	return &capacityWatch{client: c}, nil
}

// start runs the informers until ctx ends (once).
func (w *capacityWatch) start(ctx context.Context) {
	w.once.Do(func() {
		f := informers.NewSharedInformerFactory(w.client, 0)
		pods, nodes := f.Core().V1().Pods(), f.Core().V1().Nodes()
		w.pods, w.nodes = pods.Lister(), nodes.Lister()
		pi, ni := pods.Informer(), nodes.Informer()
		w.synced = func() bool { return pi.HasSynced() && ni.HasSynced() }
		f.Start(ctx.Done())
	})
}

// capacityFor is how many replicas of a Deployment this cluster can hold:
// the allocatable resources of its Ready, schedulable nodes, minus what
// the non-terminated pods bound to them request, except the Deployment's
// own pods (those in its downstream namespace that its selector matches:
// what it runs here is room it keeps), divided by what one replica
// requests (workload.CapacityFor). False until the caches are filled.
func (s *Syncer) capacityFor(ctx context.Context, namespace string, up *unstructured.Unstructured) (int32, bool) {
	w := s.capacity
	if w == nil {
		return 0, false
	}
	w.start(s.runContext(ctx))
	if !w.synced() {
		return 0, false
	}
	own := labels.Nothing()
	if raw, found, _ := unstructured.NestedMap(up.Object, "spec", "selector"); found {
		var sel metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &sel); err == nil {
			if parsed, err := metav1.LabelSelectorAsSelector(&sel); err == nil && !parsed.Empty() {
				own = parsed
			}
		}
	}
	nodes, err := w.nodes.List(labels.Everything())
	if err != nil {
		return 0, false
	}
	free := corev1.ResourceList{}
	counted := map[string]bool{}
	for _, n := range nodes {
		if !ready(n) || n.Spec.Unschedulable {
			continue
		}
		counted[n.Name] = true
		add(free, n.Status.Allocatable)
	}
	pods, err := w.pods.List(labels.Everything())
	if err != nil {
		return 0, false
	}
	for _, p := range pods {
		if !counted[p.Spec.NodeName] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Namespace == namespace && own.Matches(labels.Set(p.Labels)) {
			continue
		}
		for name, q := range workload.ReplicaRequests(&p.Spec) {
			have := free[name]
			have.Sub(q)
			free[name] = have
		}
	}
	return workload.CapacityFor(free, workload.TemplateRequests(up)), true
}

// runContext is the context the syncer runs in (informers started on the
// way live as long as it), ctx before Run.
func (s *Syncer) runContext(ctx context.Context) context.Context {
	if c := s.runCtx.Load(); c != nil {
		return *c
	}
	return ctx
}
