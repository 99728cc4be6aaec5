package workload

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// A Service's cluster IPs and node ports belong to the physical cluster
// that runs its copy: each allocates its own (the syncer never sends them
// down). Each target's syncer reports what its cluster allocated in its
// status annotation (StatusAnnotationPrefix + its key, a
// ServiceAllocation), and kcp's Service storage folds the reports into the
// Service: AllocationsAnnotation lists every target's, and
// spec.clusterIP, spec.clusterIPs, spec.ports[].nodePort and
// spec.healthCheckNodePort show the allocation of the first assigned
// target in key order (the one that reports status).

// AllocationsAnnotation, on a Service, lists what every assigned target's
// physical cluster allocated for its copy (JSON: a list of
// ServiceAllocation in target key order; the first is what the spec
// shows). kcp writes it; nobody else can.
const AllocationsAnnotation = "workload.kcp.io/allocations"

// ServiceAllocation is what one physical cluster allocated for its copy of
// a Service.
type ServiceAllocation struct {
	// Target is the SyncTarget: "<location workspace>/<name>".
	Target string `json:"target"`
	// ClusterIPs are the copy's spec.clusterIPs ("None" for a headless
	// Service, none for ExternalName).
	ClusterIPs []string `json:"clusterIPs,omitempty"`
	// NodePorts are the copy's node ports by port name ("" for a single
	// unnamed port).
	NodePorts map[string]int32 `json:"nodePorts,omitempty"`
	// HealthCheckNodePort is the copy's spec.healthCheckNodePort.
	HealthCheckNodePort int32 `json:"healthCheckNodePort,omitempty"`
	// LoadBalancer is the copy's status.loadBalancer.ingress.
	LoadBalancer []corev1.LoadBalancerIngress `json:"loadBalancer,omitempty"`
}

// Key is the target key of the allocation's SyncTarget ("" when Target is
// not "<location>/<name>").
func (a ServiceAllocation) Key() string {
	i := strings.LastIndex(a.Target, "/")
	if i <= 0 || i == len(a.Target)-1 {
		return ""
	}
	return TargetKey(a.Target[:i], a.Target[i+1:])
}

// ParseServiceAllocation decodes one target's report (the value of
// StatusAnnotationPrefix + key on a Service) and checks that it is that
// target's: the SyncTarget it names has that key.
func ParseServiceAllocation(key, annotation string) (ServiceAllocation, error) {
	var a ServiceAllocation
	if err := json.Unmarshal([]byte(annotation), &a); err != nil {
		return a, fmt.Errorf("not a Service allocation: %v", err)
	}
	if a.Key() != key {
		return a, fmt.Errorf("the allocation of %q is not the one of target key %s", a.Target, key)
	}
	return a, nil
}

// ParseServiceAllocations decodes AllocationsAnnotation, by target key
// (entries whose target does not check out are left out).
func ParseServiceAllocations(annotation string) map[string]ServiceAllocation {
	var list []ServiceAllocation
	if annotation == "" || json.Unmarshal([]byte(annotation), &list) != nil {
		return nil
	}
	out := map[string]ServiceAllocation{}
	for _, a := range list {
		if k := a.Key(); k != "" {
			out[k] = a
		}
	}
	return out
}

// FormatServiceAllocations encodes allocations (by target key) for
// AllocationsAnnotation, in target key order.
func FormatServiceAllocations(byKey map[string]ServiceAllocation) string {
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	list := make([]ServiceAllocation, 0, len(keys))
	for _, k := range keys {
		list = append(list, byKey[k])
	}
	b, _ := json.Marshal(list)
	return string(b)
}

// AllocationOf is what a physical cluster allocated for its copy of a
// Service, target being "<location>/<name>".
func AllocationOf(target string, svc *corev1.Service) ServiceAllocation {
	a := ServiceAllocation{Target: target, ClusterIPs: svc.Spec.ClusterIPs, HealthCheckNodePort: svc.Spec.HealthCheckNodePort,
		LoadBalancer: svc.Status.LoadBalancer.Ingress}
	if len(a.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		a.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			if a.NodePorts == nil {
				a.NodePorts = map[string]int32{}
			}
			a.NodePorts[p.Name] = p.NodePort
		}
	}
	return a
}
