package podstreams

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// ProjectedFromLabel marks a Pod kcp shows in a workspace for one that a
// physical cluster's controllers made (of a Deployment, ...): its value is
// the key of the SyncTarget it runs on.
const ProjectedFromLabel = "workload.kcp.io/projected-from"

var podsResource = schema.GroupResource{Resource: "pods"}

// target is where one pod runs.
type target struct {
	// Key is workload.TargetKey of the SyncTarget.
	Key string
	// Location and Name name the SyncTarget.
	Location, Name string
	// Namespace is the pod's namespace on the physical cluster.
	Namespace string
}

func (t target) String() string { return "SyncTarget " + t.Name + " in " + t.Location }

// notRunning answers for a pod no physical cluster runs (yet).
func notRunning(name, why string) error {
	return apierrors.NewBadRequest(fmt.Sprintf("pod %s is not running on a physical cluster yet: %s", name, why))
}

// route finds the SyncTarget that runs a pod of a workspace: the one a
// projected pod says it came from, else the one a directly created pod
// runs on (pods run on one target: workload.NamespacePolicy.Runs, the rule
// the syncers follow). Either must be assigned to the pod's namespace.
func (s *Streams) route(ctx context.Context, cluster logicalcluster.Name, pod *api.Pod) (target, error) {
	core, err := s.clients.Core(cluster)
	if err != nil {
		return target{}, apierrors.NewInternalError(err)
	}
	ns, err := core.Namespaces().Get(ctx, pod.Namespace, metav1.GetOptions{})
	if err != nil {
		return target{}, apierrors.NewInternalError(fmt.Errorf("reading namespace %s: %v", pod.Namespace, err))
	}
	// The assigned targets, by key.
	assigned := map[string]target{}
	for _, t := range assignedTargets(cluster, pod.Namespace, ns.Labels, ns.Annotations) {
		assigned[t.Key] = t
	}
	if len(assigned) == 0 {
		return target{}, notRunning(pod.Name, fmt.Sprintf("namespace %s is not placed on any SyncTarget", pod.Namespace))
	}
	if key, ok := pod.Labels[ProjectedFromLabel]; ok {
		t, ok := assigned[key]
		if !ok {
			return target{}, notRunning(pod.Name, fmt.Sprintf("the SyncTarget it came from (key %s) is no longer assigned to namespace %s", key, pod.Namespace))
		}
		return t, nil
	}
	pol, err := workload.ParsePolicy(ns.Annotations)
	if err != nil {
		return target{}, notRunning(pod.Name, err.Error())
	}
	keys := make([]string, 0, len(assigned))
	for k := range assigned {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if pol.Runs(podsResource, k) {
			return assigned[k], nil
		}
	}
	return target{}, notRunning(pod.Name, "none of the SyncTargets of its namespace runs it")
}
