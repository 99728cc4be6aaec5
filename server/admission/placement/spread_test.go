package placement

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/apis/apps"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/kcpsql/kcp/schema/workload"
)

func TestSpreadWarnings(t *testing.T) {
	a, b := workload.TargetKey("root:compute", "pc1"), workload.TargetKey("root:compute", "pc2")
	pol, _ := json.Marshal(workload.NamespacePolicy{Mode: workload.ModeDivide, Targets: map[string]workload.TargetPolicy{a: {Name: "pc1"}, b: {Name: "pc2"}}})
	two := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default",
		Labels:      map[string]string{workload.StateLabelPrefix + a: "Sync", workload.StateLabelPrefix + b: "Sync"},
		Annotations: map[string]string{workload.NamespacePolicyAnnotation: string(pol)}}}
	one := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{workload.StateLabelPrefix + a: "Sync"}}}
	unplaced := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	sts := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	rbs := schema.GroupResource{Group: rbac.GroupName, Resource: "rolebindings"}
	first := "pc1"
	if b < a {
		first = "pc2"
	}

	if w := spreadWarnings(sts, &apps.StatefulSet{}, "db", two); len(w) != 1 || !strings.Contains(w[0], "runs on one physical cluster only, "+first) {
		t.Errorf("StatefulSet on two targets: %q", w)
	}
	if w := spreadWarnings(sts, &apps.StatefulSet{}, "db", one); len(w) != 0 {
		t.Errorf("StatefulSet on one target: %q", w)
	}
	if w := spreadWarnings(schema.GroupResource{Group: "apps", Resource: "deployments"}, &apps.Deployment{}, "web", two); len(w) != 0 {
		t.Errorf("Deployment: %q", w)
	}

	edit := &rbac.RoleBinding{RoleRef: rbac.RoleRef{Kind: "ClusterRole", Name: "edit"}}
	if w := spreadWarnings(rbs, edit, "x", one); len(w) != 1 || !strings.Contains(w[0], "not synced") {
		t.Errorf("RoleBinding to edit: %q", w)
	}
	if w := spreadWarnings(rbs, edit, "x", unplaced); len(w) != 0 {
		t.Errorf("RoleBinding in a namespace placed nowhere: %q", w)
	}
	mixed := &rbac.RoleBinding{RoleRef: rbac.RoleRef{Kind: "Role", Name: "app"},
		Subjects: []rbac.Subject{{Kind: "ServiceAccount", Name: "app", Namespace: "default"}, {Kind: "User", Name: "alice"}}}
	if w := spreadWarnings(rbs, mixed, "x", one); len(w) != 1 || !strings.Contains(w[0], "User alice") {
		t.Errorf("RoleBinding with a user: %q", w)
	}
	sa := &rbac.RoleBinding{RoleRef: rbac.RoleRef{Kind: "ClusterRole", Name: "view"}, Subjects: mixed.Subjects[:1]}
	if w := spreadWarnings(rbs, sa, "x", one); len(w) != 0 {
		t.Errorf("RoleBinding of a service account to view: %q", w)
	}
}
