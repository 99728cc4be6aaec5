package syncer

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
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
	peer := func(nsSel string, podSel map[string]interface{}) interface{} {
		var sel map[string]interface{}
		if err := json.Unmarshal([]byte(nsSel), &sel); err != nil {
			t.Fatal(err)
		}
		p := map[string]interface{}{"namespaceSelector": sel}
		if podSel != nil {
			p["podSelector"] = podSel
		}
		return p
	}
	dns := map[string]interface{}{"matchLabels": map[string]interface{}{"k8s-app": "kube-dns"}}
	np := &unstructured.Unstructured{Object: map[string]interface{}{
		"kind": "NetworkPolicy",
		"spec": map[string]interface{}{
			"ingress": []interface{}{map[string]interface{}{"from": []interface{}{
				peer(`{"matchLabels": {"kubernetes.io/metadata.name": "frontend"}}`, nil),
				peer(`{"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "kube-system"]}]}`, nil),
				peer(`{"matchLabels": {"team": "web"}}`, nil),
				peer(`{}`, nil),
				map[string]interface{}{"podSelector": map[string]interface{}{}},
			}}},
			"egress": []interface{}{map[string]interface{}{"to": []interface{}{
				peer(`{"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}`, dns),
				peer(`{}`, dns),
			}}},
		},
	}}
	rewriteNetworkPolicy(np, "root:team")

	// Namespaces of the shared physical cluster: the workspace's (with
	// the labels the syncer carries down), another workspace's with the
	// same names and labels, and the cluster's own.
	nsLabels := func(cluster logicalcluster.Name, name string, l map[string]interface{}) labels.Set {
		up := &unstructured.Unstructured{Object: map[string]interface{}{}}
		ul := map[string]string{"kubernetes.io/metadata.name": name, "state.workload.kcp.io/abc": "Sync"}
		for k, v := range l {
			ul[k] = v.(string)
		}
		up.SetLabels(ul)
		set := labels.Set(workspaceNamespaceLabels(cluster, up))
		set["kubernetes.io/metadata.name"] = DownstreamNamespace(cluster, name)
		return set
	}
	web := map[string]interface{}{"team": "web"}
	cluster := map[string]labels.Set{
		"frontend":       nsLabels("root:team", "frontend", nil),
		"a":              nsLabels("root:team", "a", nil),
		"web":            nsLabels("root:team", "web", web),
		"other/frontend": nsLabels("root:other", "frontend", nil),
		"other/a":        nsLabels("root:other", "a", nil),
		"other/web":      nsLabels("root:other", "web", web),
		"kube-system":    {"kubernetes.io/metadata.name": "kube-system"},
		"default":        {"kubernetes.io/metadata.name": "default"},
	}
	selected := func(peers []interface{}) []string {
		var out []string
		for name, set := range cluster {
			for _, p := range peers {
				nsSel, ok := p.(map[string]interface{})["namespaceSelector"].(map[string]interface{})
				if !ok {
					continue // the policy's own namespace
				}
				var ls metav1.LabelSelector
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(nsSel, &ls); err != nil {
					t.Fatal(err)
				}
				s, err := metav1.LabelSelectorAsSelector(&ls)
				if err != nil {
					t.Fatal(err)
				}
				if s.Matches(set) {
					out = append(out, name)
					break
				}
			}
		}
		sort.Strings(out)
		return out
	}
	ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	from := ingress[0].(map[string]interface{})["from"].([]interface{})
	for i, want := range [][]string{{"frontend"}, {"a"}, {"web"}, {"a", "frontend", "web"}} {
		if got := selected([]interface{}{from[i]}); !reflect.DeepEqual(got, want) {
			t.Errorf("ingress peer %d selects %v downstream, want %v", i, got, want)
		}
	}
	if got, want := selected(from[:4]), []string{"a", "frontend", "web"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ingress peers select %v, want %v", got, want)
	}
	// kube-system, named or selected by {}, is the physical cluster's:
	// peers for it are added after the tenant's.
	if got, want := selected(from), []string{"a", "frontend", "kube-system", "web"}; !reflect.DeepEqual(got, want) {
		t.Errorf("all ingress peers select %v, want %v", got, want)
	}
	if len(from) != 7 {
		t.Errorf("ingress has %d peers, want 5 and 2 for kube-system: %v", len(from), from)
	}
	egress, _, _ := unstructured.NestedSlice(np.Object, "spec", "egress")
	to := egress[0].(map[string]interface{})["to"].([]interface{})
	if got, want := selected(to), []string{"a", "frontend", "kube-system", "web"}; !reflect.DeepEqual(got, want) {
		t.Errorf("egress peers select %v, want %v", got, want)
	}
	for _, p := range to {
		if !reflect.DeepEqual(p.(map[string]interface{})["podSelector"], dns) {
			t.Errorf("an egress peer lost its podSelector: %v", p)
		}
	}
	// The assignment label of kcp does not go down.
	for k := range cluster["web"] {
		if k == NamespaceLabelKey("state.workload.kcp.io/abc") {
			t.Errorf("kcp's assignment label was carried down")
		}
	}
}
