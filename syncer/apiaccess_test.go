package syncer

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func deployment(annotations map[string]interface{}, podSpec map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]interface{}{"name": "op", "namespace": "ops", "annotations": annotations},
		"spec":     map[string]interface{}{"template": map[string]interface{}{"spec": podSpec}},
	}}
}

func TestRedirectPods(t *testing.T) {
	s := &Syncer{upstream: map[schema.GroupVersionResource]cache.Indexer{}}
	s.api.defaults.Store(&apiEndpoint{host: "kcp.example.com", port: "6443", ca: []byte("CA")})

	up := deployment(nil, map[string]interface{}{
		"serviceAccountName": "operator",
		"initContainers":     []interface{}{map[string]interface{}{"name": "init"}},
		"containers": []interface{}{
			map[string]interface{}{"name": "a"},
			// Its own choices stay: a mount at the path, the variables.
			map[string]interface{}{"name": "b",
				"env":          []interface{}{map[string]interface{}{"name": "KUBERNETES_SERVICE_HOST", "value": "mine"}},
				"volumeMounts": []interface{}{map[string]interface{}{"name": "own", "mountPath": inClusterPath + "/"}}},
		},
	})
	out := up.DeepCopy()
	sa, err := s.redirectPods("deployments", up, out)
	if err != nil || sa != "operator" {
		t.Fatalf("redirectPods = %q, %v", sa, err)
	}
	spec, _, _ := unstructured.NestedMap(out.Object, "spec", "template", "spec")
	if spec["automountServiceAccountToken"] != false {
		t.Errorf("the physical token stays mounted: %v", spec["automountServiceAccountToken"])
	}
	vols := spec["volumes"].([]interface{})
	if len(vols) != 1 || vols[0].(map[string]interface{})["secret"].(map[string]interface{})["secretName"] != "kcp-api-access-operator" {
		t.Errorf("volumes: %v", vols)
	}
	env := func(c interface{}) map[string]string {
		m := map[string]string{}
		for _, e := range c.(map[string]interface{})["env"].([]interface{}) {
			em := e.(map[string]interface{})
			m[em["name"].(string)] = em["value"].(string)
		}
		return m
	}
	cs := spec["containers"].([]interface{})
	if e := env(cs[0]); e["KUBERNETES_SERVICE_HOST"] != "kcp.example.com" || e["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("container a's env: %v", e)
	}
	if e := env(cs[1]); e["KUBERNETES_SERVICE_HOST"] != "mine" || e["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("container b's env: %v", e)
	}
	if e := env(spec["initContainers"].([]interface{})[0]); e["KUBERNETES_SERVICE_HOST"] != "kcp.example.com" {
		t.Errorf("init container's env: %v", e)
	}
	if m := cs[1].(map[string]interface{})["volumeMounts"].([]interface{}); len(m) != 1 {
		t.Errorf("container b's own mount at the path was joined by ours: %v", m)
	}
	if m := cs[0].(map[string]interface{})["volumeMounts"].([]interface{}); len(m) != 1 || m[0].(map[string]interface{})["mountPath"] != inClusterPath {
		t.Errorf("container a's mounts: %v", m)
	}
	// The same input gives the same copy (the syncer compares hashes).
	again := up.DeepCopy()
	s.redirectPods("deployments", up, again)
	if !reflect.DeepEqual(again.Object, out.Object) {
		t.Errorf("not deterministic")
	}

	// No token where the pod or its ServiceAccount says so; the address
	// still is kcp's.
	up = deployment(nil, map[string]interface{}{"automountServiceAccountToken": false, "containers": []interface{}{map[string]interface{}{"name": "a"}}})
	out = up.DeepCopy()
	if sa, _ := s.redirectPods("deployments", up, out); sa != "" {
		t.Errorf("a pod with automountServiceAccountToken=false mounts %q", sa)
	}
	idx := cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)
	idx.Add(&unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "ServiceAccount",
		"metadata": map[string]interface{}{"name": "quiet", "namespace": "ops",
			"annotations": map[string]interface{}{logicalcluster.Annotation: "root:team"}},
		"automountServiceAccountToken": false}})
	s.upstream[serviceAccountsGVR] = idx
	up = deployment(map[string]interface{}{logicalcluster.Annotation: "root:team"}, map[string]interface{}{"serviceAccountName": "quiet", "containers": []interface{}{map[string]interface{}{"name": "a"}}})
	out = up.DeepCopy()
	if sa, _ := s.redirectPods("deployments", up, out); sa != "" {
		t.Errorf("a pod of a ServiceAccount with automountServiceAccountToken=false mounts %q", sa)
	}

	// The opt-out counts only where the target allows it.
	optOut := map[string]interface{}{workload.APIAccessAnnotation: workload.APIAccessPhysical}
	up = deployment(optOut, map[string]interface{}{"containers": []interface{}{map[string]interface{}{"name": "a"}}})
	out = up.DeepCopy()
	if sa, _ := s.redirectPods("deployments", up, out); sa != "default" {
		t.Errorf("an opt-out the target does not allow was honoured: %q", sa)
	}
	s.api.current.Store(&apiEndpoint{host: "kcp.example.com", port: "6443", physical: &workload.WorkspaceAPISpec{AllowPhysicalAPI: true}})
	out = up.DeepCopy()
	if sa, _ := s.redirectPods("deployments", up, out); sa != "" || !reflect.DeepEqual(out.Object, up.Object) {
		t.Errorf("an allowed opt-out was redirected: %q %v", sa, out.Object)
	}
	// Allowed for other workspaces only: redirected.
	s.api.current.Store(&apiEndpoint{host: "kcp.example.com", port: "6443", physical: &workload.WorkspaceAPISpec{AllowPhysicalAPI: true, PhysicalAPIWorkspaces: []string{"root:infra:*"}}})
	out = up.DeepCopy()
	if sa, _ := s.redirectPods("deployments", up, out); sa != "default" {
		t.Errorf("an opt-out allowed for other workspaces was honoured: %q", sa)
	}
	// Kinds without pods are left alone.
	svc := &unstructured.Unstructured{Object: map[string]interface{}{"kind": "Service", "spec": map[string]interface{}{}}}
	if sa, err := s.redirectPods("services", svc, svc.DeepCopy()); sa != "" || err != nil {
		t.Errorf("a Service: %q %v", sa, err)
	}
}

func TestEndpointFrom(t *testing.T) {
	for in, want := range map[string]string{"https://kcp:6443": "kcp:6443", "https://kcp.example.com": "kcp.example.com:443", "https://[::1]:8443": "::1:8443"} {
		e, err := endpointFrom(in, nil)
		if err != nil || e.host+":"+e.port != want {
			t.Errorf("%s: %v %v", in, e, err)
		}
	}
	for _, bad := range []string{"http://kcp:6443", "kcp:6443", "https://", "::"} {
		if _, err := endpointFrom(bad, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAPIAccessSecretName(t *testing.T) {
	if n := APIAccessSecretName("operator"); n != "kcp-api-access-operator" {
		t.Errorf("%s", n)
	}
	long := string(make([]byte, 250))
	if n := APIAccessSecretName(long); len(n) > 253 {
		t.Errorf("too long: %d", len(n))
	}
}

func TestLegacyPod(t *testing.T) {
	old := &unstructured.Unstructured{Object: map[string]interface{}{"kind": "Pod", "metadata": map[string]interface{}{"name": "p"}}}
	if !legacyPod("pods", old) {
		t.Error("a Pod created before the workspace API is not left as it is")
	}
	marked := old.DeepCopy()
	marked.SetAnnotations(map[string]string{RedirectedAnnotation: "true"})
	if legacyPod("pods", marked) || legacyPod("pods", nil) || legacyPod("deployments", old) {
		t.Error("a new or redirected Pod, or a Deployment, counted as legacy")
	}
	// What the syncer applies carries the mark.
	s := &Syncer{upstream: map[schema.GroupVersionResource]cache.Indexer{}}
	s.api.defaults.Store(&apiEndpoint{host: "kcp", port: "6443"})
	up := &unstructured.Unstructured{Object: map[string]interface{}{"kind": "Pod", "metadata": map[string]interface{}{"name": "p"},
		"spec": map[string]interface{}{"containers": []interface{}{map[string]interface{}{"name": "c"}}}}}
	out := up.DeepCopy()
	if _, err := s.redirectPods("pods", up, out); err != nil || out.GetAnnotations()[RedirectedAnnotation] != "true" {
		t.Errorf("the redirected copy is not marked: %v %v", err, out.GetAnnotations())
	}
}
