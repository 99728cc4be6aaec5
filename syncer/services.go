package syncer

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/schema/workload"
)

var servicesGVR = corev1.SchemeGroupVersion.WithResource("services")

// serviceForDownstream leaves a Service's cluster IPs and node ports to the
// physical cluster, which allocates its own from its own ranges (kcp shows
// them: allocationUp). A headless Service stays headless.
func serviceForDownstream(out *unstructured.Unstructured) {
	if ip, _, _ := unstructured.NestedString(out.Object, "spec", "clusterIP"); ip != corev1.ClusterIPNone {
		unstructured.RemoveNestedField(out.Object, "spec", "clusterIP")
		unstructured.RemoveNestedField(out.Object, "spec", "clusterIPs")
	}
	unstructured.RemoveNestedField(out.Object, "spec", "healthCheckNodePort")
	if ports, ok, _ := unstructured.NestedSlice(out.Object, "spec", "ports"); ok {
		for _, p := range ports {
			if m, ok := p.(map[string]interface{}); ok {
				delete(m, "nodePort")
			}
		}
		_ = unstructured.SetNestedSlice(out.Object, ports, "spec", "ports")
	}
}

// allocationUp reports what the physical cluster allocated for its copy of
// a Service (cluster IPs, node ports, load-balancer ingress) in this
// target's status annotation, the one write of metadata the syncer view
// allows; kcp folds the reports into the Service (every target's in
// workload.AllocationsAnnotation, the first target's in its spec). Nothing
// is written while kcp already lists this very report.
func (s *Syncer) allocationUp(ctx context.Context, it item, up, down *unstructured.Unstructured) error {
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(down.Object, &svc); err != nil {
		return err
	}
	report := workload.AllocationOf(string(s.location)+"/"+s.target, &svc)
	raw, err := json.Marshal(report)
	if err != nil {
		return err
	}
	name := workload.StatusAnnotationPrefix + s.key
	ann := up.GetAnnotations()
	if ann[name] == string(raw) {
		return nil
	}
	if known, ok := workload.ParseServiceAllocations(ann[workload.AllocationsAnnotation])[s.key]; ok {
		// The placement controller removes the report of the only target
		// left; kcp keeps it listed.
		if b, _ := json.Marshal(known); string(b) == string(raw) {
			return nil
		}
	}
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"annotations": map[string]string{name: string(raw)}}})
	c, err := s.upClient(it.cluster)
	if err != nil {
		return err
	}
	_, err = c.Resource(it.gvr).Namespace(it.namespace).Patch(ctx, it.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	return ignoreNotFound(err)
}
