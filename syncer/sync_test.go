package syncer

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestDownstreamNamespace(t *testing.T) {
	a := DownstreamNamespace("root:team-a", "default")
	if a == DownstreamNamespace("root:team-b", "default") || a == DownstreamNamespace("root:team-a", "other") ||
		a == DownstreamNamespace("root:team-a:default", "") {
		t.Errorf("downstream namespaces collide")
	}
	if len(a) != 20 || a[:4] != "kcp-" {
		t.Errorf("DownstreamNamespace = %q", a)
	}
}

func TestDownstreamCopy(t *testing.T) {
	s := &Syncer{key: workload.TargetKey("root:compute", "pc1")}
	up := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]interface{}{
			"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "7", "generation": int64(3),
			"finalizers":  []interface{}{workload.Finalizer("root:compute", "pc1")},
			"labels":      map[string]interface{}{"app": "web", workload.StateLabel("root:compute", "pc1"): "Sync"},
			"annotations": map[string]interface{}{logicalcluster.Annotation: "root:team-a", "note": "kept"},
		},
		"spec": map[string]interface{}{
			"clusterIP": "10.0.0.1", "clusterIPs": []interface{}{"10.0.0.1"}, "type": "NodePort",
			"ports": []interface{}{map[string]interface{}{"port": int64(80), "nodePort": int64(30080)}},
		},
		"status": map[string]interface{}{"loadBalancer": map[string]interface{}{}},
	}}
	out, err := s.downstreamCopy(up, "kcp-x")
	if err != nil {
		t.Fatal(err)
	}
	if out.GetNamespace() != "kcp-x" || out.GetName() != "web" || out.GetUID() != "" || out.GetResourceVersion() != "" || len(out.GetFinalizers()) != 0 {
		t.Errorf("metadata: %v", out.Object["metadata"])
	}
	if _, ok := out.Object["status"]; ok {
		t.Error("status went down")
	}
	l, a := out.GetLabels(), out.GetAnnotations()
	if l["app"] != "web" || l[TargetLabel] != s.key || len(l) != 2 {
		t.Errorf("labels: %v", l)
	}
	if a["note"] != "kept" || a[logicalcluster.Annotation] != "" || a[UpstreamClusterAnnotation] != "root:team-a" ||
		a[UpstreamNamespaceAnnotation] != "default" || a[UpstreamGenerationAnnotation] != "3" {
		t.Errorf("annotations: %v", a)
	}
	if _, ok, _ := unstructured.NestedString(out.Object, "spec", "clusterIP"); ok {
		t.Error("the cluster IP went down")
	}
	ports, _, _ := unstructured.NestedSlice(out.Object, "spec", "ports")
	if _, ok := ports[0].(map[string]interface{})["nodePort"]; ok {
		t.Error("the node port went down")
	}
	if _, ok, _ := unstructured.NestedString(up.Object, "spec", "clusterIP"); !ok {
		t.Error("the upstream object was modified")
	}
}
