package syncer

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestServiceDownstreamCopy: what a physical cluster allocates never goes
// down (cluster IPs, node ports, the health check node port), a headless
// Service stays headless, and kcp's allocation annotations stay in kcp.
func TestServiceDownstreamCopy(t *testing.T) {
	s := &Syncer{key: workload.TargetKey("root:compute", "pc1")}
	service := func(clusterIP string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]interface{}{"name": "web", "namespace": "default", "annotations": map[string]interface{}{
				logicalcluster.Annotation: "root:team-a", workload.AllocationsAnnotation: `[{"target":"root:compute/pc1"}]`,
				workload.StatusAnnotationPrefix + s.key: `{"target":"root:compute/pc1"}`, "note": "kept"}},
			"spec": map[string]interface{}{
				"clusterIP": clusterIP, "clusterIPs": []interface{}{clusterIP}, "type": "LoadBalancer", "externalTrafficPolicy": "Local",
				"healthCheckNodePort": int64(32100), "ports": []interface{}{map[string]interface{}{"name": "http", "port": int64(80), "nodePort": int64(30080)}},
			},
		}}
	}
	out, err := s.downstreamCopy(service("10.96.0.7"), "kcp-x")
	if err != nil {
		t.Fatal(err)
	}
	spec := out.Object["spec"].(map[string]interface{})
	for _, f := range []string{"clusterIP", "clusterIPs", "healthCheckNodePort"} {
		if _, ok := spec[f]; ok {
			t.Errorf("spec.%s went down: %v", f, spec[f])
		}
	}
	if _, ok := spec["ports"].([]interface{})[0].(map[string]interface{})["nodePort"]; ok {
		t.Error("the node port went down")
	}
	a := out.GetAnnotations()
	if a[workload.AllocationsAnnotation] != "" || a[workload.StatusAnnotationPrefix+s.key] != "" || a["note"] != "kept" {
		t.Errorf("annotations downstream: %v", a)
	}

	out, err = s.downstreamCopy(service("None"), "kcp-x")
	if err != nil {
		t.Fatal(err)
	}
	if ip, _, _ := unstructured.NestedString(out.Object, "spec", "clusterIP"); ip != "None" {
		t.Errorf("a headless Service downstream: clusterIP %q", ip)
	}
	if ips, _, _ := unstructured.NestedStringSlice(out.Object, "spec", "clusterIPs"); len(ips) != 1 || ips[0] != "None" {
		t.Errorf("a headless Service downstream: clusterIPs %v", ips)
	}
}
