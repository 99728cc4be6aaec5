package syncer

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

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

// TestApplyPolicy: a divided Deployment gets this target's share, and the
// overrides of this target apply (containers merge by name); another
// target's overrides and other resources' do not.
func TestApplyPolicy(t *testing.T) {
	me, other := workload.TargetKey("root:compute", "pc1"), workload.TargetKey("root:compute", "pc2")
	s := &Syncer{key: me}
	deployment := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]interface{}{"name": "web"},
			"spec": map[string]interface{}{"replicas": int64(7), "template": map[string]interface{}{"spec": map[string]interface{}{
				"containers": []interface{}{
					map[string]interface{}{"name": "web", "image": "nginx"},
					map[string]interface{}{"name": "sidecar", "image": "envoy"},
				}}}},
		}}
	}
	override := func(resource, patch string) workload.Override {
		return workload.Override{Resource: resource, Patch: runtime.RawExtension{Raw: []byte(patch)}}
	}
	pol := &workload.NamespacePolicy{Mode: workload.ModeDivide, Targets: map[string]workload.TargetPolicy{
		me: {Name: "root:compute/pc1", Weight: 1, Overrides: []workload.Override{
			override("deployments.apps", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"eu.registry/nginx"}]}}}}`),
			override("services", `{"spec":{"type":"LoadBalancer"}}`),
		}},
		other: {Name: "root:compute/pc2", Weight: 1, Overrides: []workload.Override{override("", `{"metadata":{"labels":{"pc2":"yes"}}}`)}},
	}}
	d := deployment()
	if err := s.applyPolicy(deploymentsGVR, d, d, pol); err != nil {
		t.Fatal(err)
	}
	replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	if want := int64(pol.Share(7, me)); replicas != want || (want != 3 && want != 4) {
		t.Errorf("replicas %d, want the share %d of 7", replicas, want)
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) != 2 || containers[0].(map[string]interface{})["image"] != "eu.registry/nginx" || containers[1].(map[string]interface{})["image"] != "envoy" {
		t.Errorf("containers after the override: %v", containers)
	}
	if d.GetLabels()["pc2"] != "" {
		t.Error("another target's override applied")
	}
	// Duplicate: the whole Deployment.
	pol.Mode = workload.ModeDuplicate
	d = deployment()
	if err := s.applyPolicy(deploymentsGVR, d, d, pol); err != nil {
		t.Fatal(err)
	}
	if replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); replicas != 7 {
		t.Errorf("Duplicate replicas %d", replicas)
	}
	// A custom resource gets a JSON merge patch.
	cr := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "spec": map[string]interface{}{"size": int64(1), "color": "red"}}}
	pol.Targets[me] = workload.TargetPolicy{Overrides: []workload.Override{override("", `{"spec":{"size":2}}`)}}
	if err := s.applyPolicy(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, cr, cr, pol); err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(cr.Object, "spec", "size"); size != 2 || cr.Object["spec"].(map[string]interface{})["color"] != "red" {
		t.Errorf("custom resource after the override: %v", cr.Object["spec"])
	}
}
