package workload

import "k8s.io/apimachinery/pkg/runtime/schema"

// Projection: what a physical cluster's controllers make of a workspace's
// workloads (Pods, ReplicaSets, ControllerRevisions, Endpoints,
// EndpointSlices, Events) is written back into the workspace by the
// target's syncer, read-only, in the user's namespace and under the
// downstream name (docs/multicluster.md, "What runs, as the workspace
// sees it").
const (
	// ProjectedFromLabel marks a projected object with the key of the
	// target whose syncer wrote it. Only that syncer (through its view)
	// may create or change such an object.
	ProjectedFromLabel = "workload.kcp.io/projected-from"
	// PhysicalClusterAnnotation names, for humans, where a projected
	// object lives: <location workspace>/<SyncTarget name>.
	PhysicalClusterAnnotation = "workload.kcp.io/physical-cluster"
	// DownstreamUIDAnnotation is the UID of the downstream object a
	// projection was made from (a tenant's delete of a projected Pod
	// deletes exactly that Pod downstream).
	DownstreamUIDAnnotation = "workload.kcp.io/downstream-uid"
)

// ProjectedResources are the resources a syncer projects from its physical
// cluster into the workspaces placed on it. They are never synced down.
var ProjectedResources = []schema.GroupVersionResource{
	{Version: "v1", Resource: "pods"},
	{Group: "apps", Version: "v1", Resource: "replicasets"},
	{Group: "apps", Version: "v1", Resource: "controllerrevisions"},
	{Version: "v1", Resource: "endpoints"},
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	{Version: "v1", Resource: "events"},
}

// ProjectedOnlyResources exist in a workspace only as projections: a
// tenant may not create or change one (kcp runs no controller making
// them; the physical clusters do).
var ProjectedOnlyResources = []schema.GroupResource{
	{Group: "apps", Resource: "replicasets"},
	{Group: "apps", Resource: "controllerrevisions"},
	{Resource: "endpoints"},
	{Group: "discovery.k8s.io", Resource: "endpointslices"},
}

// IsProjectedResource reports whether gr is one of ProjectedResources.
func IsProjectedResource(gr schema.GroupResource) bool {
	for _, r := range ProjectedResources {
		if r.GroupResource() == gr {
			return true
		}
	}
	return false
}

// IsProjectedOnly reports whether gr is one of ProjectedOnlyResources.
func IsProjectedOnly(gr schema.GroupResource) bool {
	for _, r := range ProjectedOnlyResources {
		if r == gr {
			return true
		}
	}
	return false
}
