package syncer

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestRoleBindingSubjectsRewritten(t *testing.T) {
	s := &Syncer{key: workload.TargetKey("root:compute", "pc1")}
	up := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": map[string]interface{}{"name": "app", "namespace": "shop",
			"annotations": map[string]interface{}{logicalcluster.Annotation: "root:team-a"}},
		"roleRef": map[string]interface{}{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app"},
		"subjects": []interface{}{
			map[string]interface{}{"kind": "ServiceAccount", "name": "app", "namespace": "shop"},
			map[string]interface{}{"kind": "ServiceAccount", "name": "other", "namespace": "tools"},
			map[string]interface{}{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
			map[string]interface{}{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"},
		},
	}}
	out, err := s.downstreamCopy(up, DownstreamNamespace("root:team-a", "shop"))
	if err != nil {
		t.Fatal(err)
	}
	subs, _, _ := unstructured.NestedSlice(out.Object, "subjects")
	if len(subs) != 2 {
		t.Fatalf("subjects: %v (want the two service accounts only)", subs)
	}
	for i, want := range []string{DownstreamNamespace("root:team-a", "shop"), DownstreamNamespace("root:team-a", "tools")} {
		if got := subs[i].(map[string]interface{})["namespace"]; got != want {
			t.Errorf("subject %d namespace %v, want %s", i, got, want)
		}
	}
	if name, _, _ := unstructured.NestedString(out.Object, "roleRef", "name"); name != "app" {
		t.Errorf("roleRef changed: %v", out.Object["roleRef"])
	}

	only := up.DeepCopy()
	_ = unstructured.SetNestedSlice(only.Object, []interface{}{map[string]interface{}{"kind": "User", "name": "alice"}}, "subjects")
	out, _ = s.downstreamCopy(only, "kcp-x")
	if _, ok := out.Object["subjects"]; ok {
		t.Errorf("users went down: %v", out.Object["subjects"])
	}
}

func TestRunsHere(t *testing.T) {
	a, b := workload.TargetKey("root:compute", "pc1"), workload.TargetKey("root:compute", "pc2")
	first, second := a, b
	if b < a {
		first, second = b, a
	}
	pol := &workload.NamespacePolicy{Mode: workload.ModeDuplicate, Targets: map[string]workload.TargetPolicy{a: {Name: "pc1"}, b: {Name: "pc2"}}}
	rb := &unstructured.Unstructured{Object: map[string]interface{}{"roleRef": map[string]interface{}{"kind": "ClusterRole", "name": "edit"}}}
	sts := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	for _, c := range []struct {
		key  string
		gvr  schema.GroupVersionResource
		obj  *unstructured.Unstructured
		want bool
	}{
		{first, sts, nil, true}, {second, sts, nil, false},
		{first, deploymentsGVR, nil, true}, {second, deploymentsGVR, nil, true},
		{first, rolebindingsGVR, rb, false},
	} {
		s := &Syncer{key: c.key}
		if got, why := s.runsHere(c.gvr, c.obj, pol); got != c.want || (!got && why == "") {
			t.Errorf("%s on %s: runsHere = %v %q", c.gvr.Resource, c.key, got, why)
		}
	}
}

func TestJobAndCronJobMapping(t *testing.T) {
	job := &unstructured.Unstructured{Object: map[string]interface{}{"spec": map[string]interface{}{
		"selector": map[string]interface{}{"matchLabels": map[string]interface{}{"batch.kubernetes.io/controller-uid": "kcp-uid"}},
		"template": map[string]interface{}{"metadata": map[string]interface{}{"labels": map[string]interface{}{
			"controller-uid": "kcp-uid", "batch.kubernetes.io/controller-uid": "kcp-uid", "job-name": "pi", "app": "pi"}}},
	}}}
	jobWithoutSelector(job)
	if _, ok := job.Object["spec"].(map[string]interface{})["selector"]; ok {
		t.Error("kcp's generated selector went down")
	}
	l, _, _ := unstructured.NestedStringMap(job.Object, "spec", "template", "metadata", "labels")
	if len(l) != 2 || l["app"] != "pi" || l["job-name"] != "pi" {
		t.Errorf("template labels: %v", l)
	}

	st := map[string]interface{}{"active": []interface{}{map[string]interface{}{"kind": "Job", "name": "tick-1", "namespace": "kcp-0123", "uid": "x"}}}
	statusForUpstream(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}, st, "default")
	ref := st["active"].([]interface{})[0].(map[string]interface{})
	if ref["namespace"] != "default" || ref["uid"] != nil || ref["name"] != "tick-1" {
		t.Errorf("active: %v", ref)
	}
}

func TestRewriteNetworkPolicy(t *testing.T) {
	np := &unstructured.Unstructured{Object: map[string]interface{}{
		"kind": "NetworkPolicy",
		"spec": map[string]interface{}{
			"ingress": []interface{}{map[string]interface{}{"from": []interface{}{
				map[string]interface{}{"namespaceSelector": map[string]interface{}{"matchLabels": map[string]interface{}{"kubernetes.io/metadata.name": "frontend"}}},
				map[string]interface{}{"namespaceSelector": map[string]interface{}{"matchExpressions": []interface{}{
					map[string]interface{}{"key": "kubernetes.io/metadata.name", "operator": "In", "values": []interface{}{"a", "kube-system"}}}}},
				map[string]interface{}{"podSelector": map[string]interface{}{}},
			}}},
			"egress": []interface{}{map[string]interface{}{"to": []interface{}{
				map[string]interface{}{"namespaceSelector": map[string]interface{}{"matchLabels": map[string]interface{}{"kubernetes.io/metadata.name": "kube-system"}},
					"podSelector": map[string]interface{}{"matchLabels": map[string]interface{}{"k8s-app": "kube-dns"}}},
			}}},
		},
	}}
	rewriteNetworkPolicy(np, "root:team")
	from, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	peers := from[0].(map[string]interface{})["from"].([]interface{})
	if got := peers[0].(map[string]interface{})["namespaceSelector"].(map[string]interface{})["matchLabels"].(map[string]interface{})["kubernetes.io/metadata.name"]; got != DownstreamNamespace("root:team", "frontend") {
		t.Errorf("matchLabels: %v", got)
	}
	vals := peers[1].(map[string]interface{})["namespaceSelector"].(map[string]interface{})["matchExpressions"].([]interface{})[0].(map[string]interface{})["values"].([]interface{})
	if vals[0] != DownstreamNamespace("root:team", "a") || vals[1] != "kube-system" {
		t.Errorf("matchExpressions values: %v", vals)
	}
	to, _, _ := unstructured.NestedSlice(np.Object, "spec", "egress")
	dns := to[0].(map[string]interface{})["to"].([]interface{})[0].(map[string]interface{})["namespaceSelector"].(map[string]interface{})["matchLabels"].(map[string]interface{})
	if dns["kubernetes.io/metadata.name"] != "kube-system" {
		t.Errorf("the DNS egress rule was rewritten: %v", dns)
	}
}
