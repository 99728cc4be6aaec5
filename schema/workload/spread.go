package workload

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Spread is how the objects of one synced kind are shared between the
// several SyncTargets a namespace can be assigned to (Duplicate or Divide
// placement). docs/multicluster.md has the table and the reasons.
type Spread int

const (
	// SpreadCopies: every target runs a copy of the object, unchanged, in
	// both modes (ConfigMaps, Services, DaemonSets: one per cluster, ...).
	SpreadCopies Spread = iota
	// SpreadReplicas: every target runs a copy; Divide splits
	// spec.replicas between them (Deployments).
	SpreadReplicas
	// SpreadOne: exactly one target runs the object, whatever the mode:
	// what must not run twice (a CronJob's schedule, a Job's completions,
	// a StatefulSet's ordinals and the claims bound to them, a Pod created
	// directly: one Pod is one Pod). The target
	// is the namespace's first target in key order (NamespacePolicy.One).
	SpreadOne
	// SpreadBounds: every target runs a copy; Divide splits minReplicas
	// and maxReplicas like replicas (HorizontalPodAutoscalers: one per
	// share of the Deployment they scale).
	SpreadBounds
)

// SpreadOf is the Spread of a resource (SpreadCopies for any not named).
func SpreadOf(gr schema.GroupResource) Spread {
	switch gr {
	case schema.GroupResource{Group: "apps", Resource: "deployments"}:
		return SpreadReplicas
	case schema.GroupResource{Group: "apps", Resource: "statefulsets"},
		schema.GroupResource{Group: "batch", Resource: "jobs"},
		schema.GroupResource{Group: "batch", Resource: "cronjobs"},
		schema.GroupResource{Resource: "pods"}:
		return SpreadOne
	case schema.GroupResource{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:
		return SpreadBounds
	}
	return SpreadCopies
}

// One is the key of the one target that runs SpreadOne objects of a
// namespace with this policy: the first assigned target in key order
// (leaving ones included, so that a drained target stops its copy before
// the next one starts another: at most one runs). "" for a nil policy
// (one target: that one).
func (p *NamespacePolicy) One() string {
	if p == nil {
		return ""
	}
	keys := make([]string, 0, len(p.Targets))
	for k := range p.Targets {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Strings(keys)
	return keys[0]
}

// Runs reports whether target key runs an object of resource gr under the
// policy.
func (p *NamespacePolicy) Runs(gr schema.GroupResource, key string) bool {
	if SpreadOf(gr) != SpreadOne || p == nil || len(p.Targets) < 2 {
		return true
	}
	return p.One() == key
}

// BoundsShare is a HorizontalPodAutoscaler's minReplicas and maxReplicas
// on target key: in Divide mode each target's share of them by the same
// division as a Deployment's replicas, at least 1 (an autoscaler cannot
// scale to zero), max never below min; unchanged otherwise.
func (p *NamespacePolicy) BoundsShare(minReplicas, maxReplicas int32, key string) (int32, int32) {
	if p == nil || p.Mode != ModeDivide {
		return minReplicas, maxReplicas
	}
	lo, hi := max(1, p.Share(minReplicas, key)), max(1, p.Share(maxReplicas, key))
	return lo, max(lo, hi)
}

// SyncedClusterRoles are the ClusterRoles a RoleBinding may reference and
// still be synced: RoleBindings to them are copied into the downstream
// namespace, where the physical cluster's own ClusterRole of that name
// applies. Only "view" (read what is in the namespace, secrets excepted):
// "edit" and "admin" would let a tenant's pods create pods and bindings
// on the physical cluster directly, past kcp and the location's policy,
// and any other name means whatever the physical cluster's operator
// defined. RoleBindings to other ClusterRoles stay in the workspace.
var SyncedClusterRoles = []string{"view"}

// RoleBindingSynced reports whether a RoleBinding with this roleRef is
// synced, and if not why.
func RoleBindingSynced(kind, name string) (bool, string) {
	switch kind {
	case "Role":
		return true, ""
	case "ClusterRole":
		for _, n := range SyncedClusterRoles {
			if n == name {
				return true, ""
			}
		}
		return false, fmt.Sprintf("it references ClusterRole %q: a RoleBinding is synced to physical clusters only with a Role of its namespace or ClusterRole %v "+
			"(ClusterRoles stay in the workspace; on a shared physical cluster another ClusterRole would grant what that cluster's operator defined); "+
			"it grants %q in this workspace only", name, SyncedClusterRoles, name)
	}
	return false, fmt.Sprintf("roleRef kind %q is neither Role nor ClusterRole", kind)
}
