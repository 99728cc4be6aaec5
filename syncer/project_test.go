package syncer

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestProjection(t *testing.T) {
	const team = logicalcluster.Name("root:team-a")
	dns := DownstreamNamespace(team, "default")
	s := &Syncer{location: "root:compute", target: "pc1", key: workload.TargetKey("root:compute", "pc1"),
		upstream: map[schema.GroupVersionResource]cache.Indexer{}}
	for _, gvr := range append([]schema.GroupVersionResource{namespacesGVR}, ownerKinds["apps/Deployment"], ownerKinds["/Service"]) {
		s.upstream[gvr] = cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)
	}
	p := &projector{s: s, own: map[schema.GroupVersionResource]cache.Indexer{}}
	for _, gvr := range workload.ProjectedResources {
		p.own[gvr] = cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)
	}
	_ = s.upstream[deploymentsGVR].Add(obj(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","uid":"up-deploy","annotations":{"kcp.io/cluster":"root:team-a"}}}`))

	// A ReplicaSet: its Deployment owner gets the upstream UID; the
	// syncer's label goes, projected-from and the cluster come.
	rs := obj(t, `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web-1","namespace":"`+dns+`","uid":"down-rs",
		"labels":{"app":"web","`+TargetLabel+`":"x"},"annotations":{"deployment.kubernetes.io/revision":"2"},
		"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"down-deploy","controller":true}]},
		"spec":{"replicas":2},"status":{"replicas":2}}`)
	got, retry := p.projection(replicaSetsGVR, rs, team, "default")
	if retry != 0 || got.GetNamespace() != "default" || got.GetLabels()[workload.ProjectedFromLabel] != s.key || got.GetLabels()[TargetLabel] != "" ||
		got.GetAnnotations()[workload.PhysicalClusterAnnotation] != "root:compute/pc1" || got.GetAnnotations()[workload.DownstreamUIDAnnotation] != "down-rs" ||
		got.GetAnnotations()["deployment.kubernetes.io/revision"] != "2" || len(got.GetOwnerReferences()) != 1 || got.GetOwnerReferences()[0].UID != "up-deploy" ||
		got.Object["status"] != nil {
		b, _ := json.Marshal(got.Object)
		t.Errorf("projected ReplicaSet: %s (retry %v)", b, retry)
	}

	// A Pod whose ReplicaSet is not projected yet: the owner is dropped
	// (never a downstream UID) and the pod looked at again.
	pod := obj(t, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1-a","namespace":"`+dns+`","uid":"down-pod",
		"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","uid":"down-rs","controller":true},
		{"apiVersion":"example.com/v1","kind":"Thing","name":"t","uid":"down-thing"}]},"spec":{"priority":5,"nodeName":"n1"}}`)
	got, retry = p.projection(podsGVR, pod, team, "default")
	if retry == 0 || len(got.GetOwnerReferences()) != 0 {
		t.Errorf("pod without its ReplicaSet upstream: owners %v retry %v", got.GetOwnerReferences(), retry)
	}
	if _, has, _ := unstructured.NestedInt64(got.Object, "spec", "priority"); has {
		t.Error("spec.priority projected")
	}
	up := obj(t, `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web-1","namespace":"default","uid":"up-rs","annotations":{"kcp.io/cluster":"root:team-a"}}}`)
	_ = p.own[replicaSetsGVR].Add(up)
	got, _ = p.projection(podsGVR, pod, team, "default")
	if refs := got.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != "up-rs" || refs[0].Kind != "ReplicaSet" {
		t.Errorf("pod's owners: %v", refs)
	}

	// An Event about the pod: in the user's namespace, with its upstream
	// UID once projected.
	_ = p.own[podsGVR].Add(obj(t, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1-a","namespace":"default","uid":"up-pod","annotations":{"kcp.io/cluster":"root:team-a"}}}`))
	ev := obj(t, `{"apiVersion":"v1","kind":"Event","metadata":{"name":"web-1-a.1","namespace":"`+dns+`"},
		"involvedObject":{"kind":"Pod","namespace":"`+dns+`","name":"web-1-a","uid":"down-pod"},"reason":"Scheduled",
		"message":"Successfully assigned `+dns+`/web-1-a to n1"}`)
	got, _ = p.projection(schema.GroupVersionResource{Version: "v1", Resource: "events"}, ev, team, "default")
	inv := got.Object["involvedObject"].(map[string]interface{})
	if inv["namespace"] != "default" || inv["uid"] != "up-pod" || strings.Contains(got.Object["message"].(string), dns) {
		t.Errorf("projected event: %v %v", inv, got.Object["message"])
	}

	// An EndpointSlice: targetRefs in the user's namespace, owner the
	// Service (not upstream: dropped, looked at again).
	es := obj(t, `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-x","namespace":"`+dns+`",
		"ownerReferences":[{"apiVersion":"v1","kind":"Service","name":"web","uid":"down-svc"}]},"addressType":"IPv4",
		"endpoints":[{"addresses":["10.0.0.1"],"targetRef":{"kind":"Pod","namespace":"`+dns+`","name":"web-1-a","uid":"down-pod"}}]}`)
	got, retry = p.projection(schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, es, team, "default")
	ref := got.Object["endpoints"].([]interface{})[0].(map[string]interface{})["targetRef"].(map[string]interface{})
	if ref["namespace"] != "default" || ref["uid"] != "up-pod" || retry == 0 || len(got.GetOwnerReferences()) != 0 {
		t.Errorf("projected EndpointSlice: %v owners %v retry %v", ref, got.GetOwnerReferences(), retry)
	}
}
