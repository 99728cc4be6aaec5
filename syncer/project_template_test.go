package syncer

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/server/clusterinformer"
)

// TestTemplateAsWritten: a projected ReplicaSet's pod template is its
// Deployment's in kcp, whatever redirectPods added downstream, and what the
// tenant wrote itself stays.
func TestTemplateAsWritten(t *testing.T) {
	for name, podSpec := range map[string]map[string]interface{}{
		"plain": {"containers": []interface{}{map[string]interface{}{"name": "web", "image": "nginx"}}},
		"own choices": {
			"automountServiceAccountToken": true,
			"volumes":                      []interface{}{map[string]interface{}{"name": "data", "emptyDir": map[string]interface{}{}}},
			"initContainers":               []interface{}{map[string]interface{}{"name": "init"}},
			"containers": []interface{}{
				map[string]interface{}{"name": "a", "env": []interface{}{map[string]interface{}{"name": "KUBERNETES_SERVICE_HOST", "value": "mine"},
					map[string]interface{}{"name": "X", "value": "1"}}},
				map[string]interface{}{"name": "b", "volumeMounts": []interface{}{map[string]interface{}{"name": "data", "mountPath": "/data"}}},
			},
		},
		"no token": {"automountServiceAccountToken": false, "containers": []interface{}{map[string]interface{}{"name": "web"}}},
	} {
		s := &Syncer{upstream: map[schema.GroupVersionResource]cache.Indexer{deploymentsGVR: cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)}}
		s.api.defaults.Store(&apiEndpoint{host: "kcp.example.com", port: "6443", ca: []byte("CA")})
		up := deployment(nil, podSpec)
		up.SetName("web")
		up.SetNamespace("default")
		up.SetAnnotations(map[string]string{"kcp.io/cluster": "root:team"})
		if err := s.upstream[deploymentsGVR].Add(up); err != nil {
			t.Fatal(err)
		}
		down := up.DeepCopy()
		if _, err := s.redirectPods("deployments", up, down); err != nil {
			t.Fatal(err)
		}
		tmpl, _, _ := unstructured.NestedMap(down.Object, "spec", "template")
		rs := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "apps/v1", "kind": "ReplicaSet",
			"metadata": map[string]interface{}{"name": "web-1", "namespace": "default",
				"ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u", "controller": true}}},
			"spec": map[string]interface{}{"template": tmpl}}}
		before, _ := json.Marshal(rs.Object)
		p := &projector{s: s}
		p.templateAsWritten(rs, "root:team", "default")
		got, _, _ := unstructured.NestedMap(rs.Object, "spec", "template", "spec")
		want, _, _ := unstructured.NestedMap(up.Object, "spec", "template", "spec")
		if !equality.Semantic.DeepEqual(jsonRound(got), jsonRound(want)) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("%s: projected template\n%s\nwant the Deployment's\n%s\n(downstream %s)", name, g, w, before)
		}

		// A StatefulSet's ControllerRevision holds its template as a
		// patch (data.spec.template): the same goes for it.
		sts := up.DeepCopy()
		sts.SetKind("StatefulSet")
		s.upstream[statefulsetsGVR] = cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)
		if err := s.upstream[statefulsetsGVR].Add(sts); err != nil {
			t.Fatal(err)
		}
		stsDown := sts.DeepCopy()
		if _, err := s.redirectPods("statefulsets", sts, stsDown); err != nil {
			t.Fatal(err)
		}
		stsTmpl, _, _ := unstructured.NestedMap(stsDown.Object, "spec", "template")
		stsTmpl["$patch"] = "replace"
		cr := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "apps/v1", "kind": "ControllerRevision",
			"metadata": map[string]interface{}{"name": "web-abc", "namespace": "default",
				"ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u", "controller": true}}},
			"data": map[string]interface{}{"spec": map[string]interface{}{"template": stsTmpl}}, "revision": int64(1)}}
		p.templateAsWritten(cr, "root:team", "default")
		got, _, _ = unstructured.NestedMap(cr.Object, "data", "spec", "template", "spec")
		if !equality.Semantic.DeepEqual(jsonRound(got), jsonRound(want)) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("%s: projected ControllerRevision's template\n%s\nwant the StatefulSet's\n%s", name, g, w)
		}
		if p, _, _ := unstructured.NestedString(cr.Object, "data", "spec", "template", "$patch"); p != "replace" {
			t.Errorf("%s: the ControllerRevision's patch directive was lost", name)
		}
	}
}
