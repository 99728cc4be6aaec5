package placement

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/kcpsql/kcp/schema/workload"
)

// warnSpread tells the creator of an object in an assigned namespace what
// kcp will not do with it, so that nothing is accepted and then ignored
// without a word: a kind that runs on one target only (a StatefulSet,
// Job or CronJob in a namespace placed on several), and a RoleBinding, or
// the subjects of one, that stays in the workspace.
func warnSpread(ctx context.Context, gr schema.GroupResource, obj runtime.Object, name string, ns *corev1.Namespace) {
	for _, w := range spreadWarnings(gr, obj, name, ns) {
		warning.AddWarning(ctx, "", w)
	}
}

func spreadWarnings(gr schema.GroupResource, obj runtime.Object, name string, ns *corev1.Namespace) []string {
	pol, _ := workload.ParsePolicy(ns.Annotations)
	var out []string
	if workload.SpreadOf(gr) == workload.SpreadOne && pol != nil && len(pol.Targets) > 1 {
		out = append(out, fmt.Sprintf("%s %q runs on one physical cluster only, %s, not on each of the %d SyncTargets namespace %q is placed on "+
			"(Duplicate and Divide do not apply to %s: it must not run twice; see docs/multicluster.md)",
			gr, name, pol.Targets[pol.One()].Name, len(pol.Targets), ns.Name, gr.Resource))
	}
	rb, ok := obj.(*rbac.RoleBinding)
	if !ok || gr != (schema.GroupResource{Group: rbac.GroupName, Resource: "rolebindings"}) || !assigned(ns) {
		return out
	}
	if synced, why := workload.RoleBindingSynced(rb.RoleRef.Kind, rb.RoleRef.Name); !synced {
		return append(out, fmt.Sprintf("RoleBinding %q is not synced to the physical clusters: %s", name, why))
	}
	var kcpOnly []string
	for _, s := range rb.Subjects {
		if s.Kind != rbac.ServiceAccountKind {
			kcpOnly = append(kcpOnly, s.Kind+" "+s.Name)
		}
	}
	if len(kcpOnly) > 0 {
		out = append(out, fmt.Sprintf("RoleBinding %q: subjects %s are identities of kcp and grant in this workspace only; "+
			"on the physical clusters only its ServiceAccount subjects are bound", name, strings.Join(kcpOnly, ", ")))
	}
	return out
}

// assigned reports whether a namespace is assigned to any SyncTarget.
func assigned(ns *corev1.Namespace) bool {
	for k, v := range ns.Labels {
		if strings.HasPrefix(k, workload.StateLabelPrefix) && v == workload.StateSync {
			return true
		}
	}
	return false
}
