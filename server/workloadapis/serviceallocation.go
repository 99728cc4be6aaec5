package workloadapis

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/schema/workload"
)

// A Service's cluster IPs and node ports are the physical cluster's: each
// allocates its own for its copy, and its syncer reports them in its
// status annotation (workload.ServiceAllocation). Every write of a Service
// in kcp, whoever makes it, passes through foldAllocations and
// showAllocation, which make the allocated fields kcp's own:
//
//   - workload.AllocationsAnnotation lists the last report of every
//     assigned target (a report stays listed after the placement
//     controller removes the target's annotation, as it does when one
//     target is left); a target no longer assigned drops out;
//   - spec.clusterIP(s), spec.ports[].nodePort and spec.healthCheckNodePort
//     are those of the first assigned target in key order (the one whose
//     status the Service shows), none until it has reported.
//
// Only data no tenant can write goes in: the assignment labels and the
// per-target annotations (placement admission restores them on a tenant's
// write and refuses a change) and the stored allocations of the old
// object. A client's own values for these fields are not used (each
// physical cluster allocates its own; the syncer never sends them down):
// omitted, the shown ones are kept, as upstream keeps allocated values;
// different, they are replaced, with a warning. A headless Service stays
// headless and an ExternalName Service has none of them.

// foldAllocations writes svc's AllocationsAnnotation from the reports on
// svc and the allocations old listed (on a create, the ones svc carries:
// only system:masters can give a new object kcp's annotations), and
// returns the allocation the spec shows (nil: its target has not reported).
func foldAllocations(svc, old *api.Service) *workload.ServiceAllocation {
	from := svc
	if old != nil {
		from = old
	}
	known := workload.ParseServiceAllocations(from.Annotations[workload.AllocationsAnnotation])
	keys := assignedKeys(svc.Labels)
	now := map[string]workload.ServiceAllocation{}
	for _, k := range keys {
		if raw, ok := svc.Annotations[workload.StatusAnnotationPrefix+k]; ok {
			if a, err := workload.ParseServiceAllocation(k, raw); err == nil {
				now[k] = a
				continue
			}
		}
		if a, ok := known[k]; ok {
			now[k] = a
		}
	}
	if len(now) == 0 {
		delete(svc.Annotations, workload.AllocationsAnnotation)
	} else {
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[workload.AllocationsAnnotation] = workload.FormatServiceAllocations(now)
	}
	if len(keys) == 0 {
		return nil
	}
	if a, ok := now[keys[0]]; ok {
		return &a
	}
	return nil
}

// assignedKeys are the keys of the targets an object is assigned to, in
// key order.
func assignedKeys(labels map[string]string) []string {
	var keys []string
	for k, v := range labels {
		if key, ok := strings.CutPrefix(k, workload.StateLabelPrefix); ok && v == workload.StateSync {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys
}

// showAllocation sets svc's cluster IPs and node ports to shown's (none
// when shown is nil) and returns a warning for each value of the client's
// that is not used. old is nil on a create.
func showAllocation(svc, old *api.Service, shown *workload.ServiceAllocation) []string {
	if svc.Spec.Type == api.ServiceTypeExternalName {
		return nil
	}
	if shown == nil {
		shown = &workload.ServiceAllocation{}
	}
	var warnings []string
	// Omitted: kept (a headless Service stays headless).
	if old != nil && old.Spec.Type != api.ServiceTypeExternalName && svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, slices.Clone(old.Spec.ClusterIPs)
	}
	// A headless Service, or one a client makes headless or not, keeps what
	// the client asked: validation refuses the change as upstream does.
	if allocatedByKCP(svc) && (old == nil || allocatedByKCP(old)) {
		var want []string
		for _, ip := range shown.ClusterIPs {
			if ip != api.ClusterIPNone {
				want = append(want, ip)
			}
		}
		got := svc.Spec.ClusterIPs
		if len(got) == 0 && svc.Spec.ClusterIP != "" {
			got = []string{svc.Spec.ClusterIP}
		}
		if len(got) > 0 && !slices.Equal(got, want) && (old == nil || !slices.Equal(got, old.Spec.ClusterIPs)) {
			warnings = append(warnings, fmt.Sprintf("spec.clusterIPs %v is not used: each physical cluster allocates its own cluster IP, "+
				"and kcp shows the one of the physical cluster that reports the Service's status (docs/multicluster.md)", got))
		}
		svc.Spec.ClusterIPs, svc.Spec.ClusterIP = want, ""
		if len(want) > 0 {
			svc.Spec.ClusterIP = want[0]
		}
	}
	if svc.Spec.Type == api.ServiceTypeNodePort || svc.Spec.Type == api.ServiceTypeLoadBalancer {
		before := map[string]int32{}
		if old != nil {
			for _, p := range old.Spec.Ports {
				before[p.Name] = p.NodePort
			}
		}
		// A copy: on a status write the ports are the stored object's.
		svc.Spec.Ports = slices.Clone(svc.Spec.Ports)
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			want := shown.NodePorts[p.Name]
			if p.NodePort != 0 && p.NodePort != want && p.NodePort != before[p.Name] {
				warnings = append(warnings, fmt.Sprintf("spec.ports[%d].nodePort %d is not used: each physical cluster allocates its own node ports, "+
					"and kcp shows those of the physical cluster that reports the Service's status (docs/multicluster.md)", i, p.NodePort))
			}
			p.NodePort = want
		}
	}
	if needsHealthCheck(svc) {
		h := svc.Spec.HealthCheckNodePort
		if h != 0 && h != shown.HealthCheckNodePort && (old == nil || h != old.Spec.HealthCheckNodePort) {
			warnings = append(warnings, fmt.Sprintf("spec.healthCheckNodePort %d is not used: each physical cluster allocates its own", h))
		}
		svc.Spec.HealthCheckNodePort = shown.HealthCheckNodePort
	}
	return warnings
}

// allocatedByKCP: a Service whose cluster IPs are kcp's to show (not
// ExternalName, not headless).
func allocatedByKCP(svc *api.Service) bool {
	if svc.Spec.Type == api.ServiceTypeExternalName {
		return false
	}
	return svc.Spec.ClusterIP != api.ClusterIPNone && !(len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIPs[0] == api.ClusterIPNone)
}

// needsHealthCheck: a LoadBalancer Service that keeps traffic on the node
// it arrives at has a health check node port.
func needsHealthCheck(svc *api.Service) bool {
	return svc.Spec.Type == api.ServiceTypeLoadBalancer && svc.Spec.ExternalTrafficPolicy == api.ServiceExternalTrafficPolicyLocal
}

// validationBase is old as validation of an update to svc compares it:
// with svc's cluster IPs and health check node port when both are kcp's
// to show, since kcp changes them (a Service that moves to another
// cluster shows that cluster's), and a client cannot (showAllocation).
func validationBase(svc, old *api.Service) *api.Service {
	if !allocatedByKCP(svc) || !allocatedByKCP(old) {
		return old
	}
	base := old.DeepCopy()
	base.Spec.ClusterIP, base.Spec.ClusterIPs = svc.Spec.ClusterIP, slices.Clone(svc.Spec.ClusterIPs)
	base.Spec.HealthCheckNodePort = svc.Spec.HealthCheckNodePort
	return base
}
