package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Taints of SyncTargets and tolerations of Placements
// (schema/workload/taints.go):
//
//   - kcp sets a taint's timeAdded (a client's value is replaced: the time
//     a NoExecute toleration counts from is not the client's to choose);
//   - kcp's own taints (not-ready, unschedulable) are kcp's: a request
//     that leaves them out keeps them (as an apply that does not mention
//     them), one that adds or changes them is refused;
//   - a Placement's toleration that names a taint its location reserved
//     for other workspaces, or the cordon taint, is refused.

var synctargets = workload.SyncTargetsResource.GroupResource()

func privileged(a admission.Attributes) bool {
	u := a.GetUserInfo()
	return u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// decodeTaints reads spec.taints of a SyncTarget object.
func decodeTaints(obj runtime.Object) ([]workload.Taint, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, false
	}
	raw, found, err := unstructured.NestedSlice(u.Object, "spec", "taints")
	if err != nil {
		return nil, false
	}
	if !found {
		return nil, true
	}
	var out []workload.Taint
	for _, r := range raw {
		m, ok := r.(map[string]interface{})
		if !ok {
			return nil, false
		}
		var t workload.Taint
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &t) != nil {
			return nil, false
		}
		out = append(out, t)
	}
	return out, true
}

func setTaints(obj runtime.Object, taints []workload.Taint) {
	u := obj.(*unstructured.Unstructured)
	if len(taints) == 0 {
		unstructured.RemoveNestedField(u.Object, "spec", "taints")
		return
	}
	raw := make([]interface{}, 0, len(taints))
	for i := range taints {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&taints[i])
		if err != nil {
			return
		}
		raw = append(raw, m)
	}
	_ = unstructured.SetNestedSlice(u.Object, raw, "spec", "taints")
}

// admitTaints sets the timeAdded of a SyncTarget's taints (kept for a
// taint the object had already, with the same key, effect and value; now
// for a new one; whatever the client sent) and keeps kcp's taints that a
// request leaves out. Only kcp's own controller sets the timeAdded of
// kcp's taints.
func admitTaints(a admission.Attributes) {
	if a.GetResource().GroupResource() != synctargets || a.GetSubresource() != "" {
		return
	}
	taints, ok := decodeTaints(a.GetObject())
	if !ok {
		return
	}
	var old []workload.Taint
	if a.GetOperation() == admission.Update && a.GetOldObject() != nil {
		old, _ = decodeTaints(a.GetOldObject())
	}
	priv := privileged(a)
	now := metav1.Now()
	hasKCP := false
	for i := range taints {
		t := &taints[i]
		if workload.KCPTaint(t.Key) {
			hasKCP = true
			if priv {
				// kcp's controller: not-ready counts from when the
				// target stopped being Ready.
				if t.TimeAdded == nil {
					t.TimeAdded = &now
				}
				continue
			}
		}
		t.TimeAdded = &now
		for _, o := range old {
			if o.Key == t.Key && o.Effect == t.Effect && o.Value == t.Value && o.TimeAdded != nil {
				t.TimeAdded = o.TimeAdded.DeepCopy()
			}
		}
	}
	if !priv && !hasKCP {
		for _, o := range old {
			if workload.KCPTaint(o.Key) {
				taints = append(taints, o)
			}
		}
	}
	if len(taints) > 0 || len(old) > 0 {
		setTaints(a.GetObject(), taints)
	}
}

// validateTaints checks a SyncTarget's taints.
func validateTaints(a admission.Attributes) error {
	taints, ok := decodeTaints(a.GetObject())
	if !ok {
		return nil // the schema answers
	}
	seen := map[string]bool{}
	for i, t := range taints {
		field := fmt.Sprintf("spec.taints[%d]", i)
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return admission.NewForbidden(a, fmt.Errorf("%s.key %q: %s", field, t.Key, strings.Join(errs, "; ")))
		}
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return admission.NewForbidden(a, fmt.Errorf("%s.value %q: %s", field, t.Value, strings.Join(errs, "; ")))
		}
		switch t.Effect {
		case workload.TaintNoSchedule, workload.TaintPreferNoSchedule, workload.TaintNoExecute:
		default:
			return admission.NewForbidden(a, fmt.Errorf("%s.effect %q: want NoSchedule, PreferNoSchedule or NoExecute", field, t.Effect))
		}
		if k := t.Key + ":" + t.Effect; seen[k] {
			return admission.NewForbidden(a, fmt.Errorf("%s: a second taint %s with effect %s", field, t.Key, t.Effect))
		}
		seen[t.Key+":"+t.Effect] = true
		if len(t.TolerableBy) > 0 && !t.Reserved {
			return admission.NewForbidden(a, fmt.Errorf("%s.tolerableBy applies to reserved taints only: set reserved: true (only Placements of those workspaces may then tolerate %s), or remove tolerableBy", field, t.Key))
		}
		if workload.KCPTaint(t.Key) && (t.Reserved || len(t.TolerableBy) > 0) {
			return admission.NewForbidden(a, fmt.Errorf("%s: kcp's taint %s cannot be reserved", field, t.Key))
		}
	}
	if privileged(a) {
		return nil
	}
	var old []workload.Taint
	if a.GetOperation() == admission.Update && a.GetOldObject() != nil {
		old, _ = decodeTaints(a.GetOldObject())
	}
	if kcpTaintsOf(taints) != kcpTaintsOf(old) {
		return admission.NewForbidden(a, fmt.Errorf("spec.taints: %s, %s and %s are kcp's: they follow the target's Ready condition, spec.unschedulable (kubectl kcp workload cordon) and OutOfCapacity condition; "+
			"leave them as they are", workload.TaintNotReady, workload.TaintUnschedulable, workload.TaintOutOfCapacity))
	}
	return nil
}

func kcpTaintsOf(taints []workload.Taint) string {
	var out []string
	for _, t := range taints {
		if workload.KCPTaint(t.Key) {
			at := ""
			if t.TimeAdded != nil {
				at = t.TimeAdded.UTC().String()
			}
			out = append(out, t.Key+"="+t.Value+":"+t.Effect+"@"+at)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// validateTolerations checks a Placement's tolerations: well formed, and
// none names a taint its workspace may not tolerate.
func (p *Plugin) validateTolerations(ctx context.Context, a admission.Attributes, cluster logicalcluster.Name, pl *workload.Placement) error {
	for i, t := range pl.Spec.Tolerations {
		field := fmt.Sprintf("spec.tolerations[%d]", i)
		switch t.Operator {
		case "", workload.TolerationEqual:
			if t.Key == "" {
				return admission.NewForbidden(a, fmt.Errorf("%s: an empty key matches every taint and needs operator Exists", field))
			}
		case workload.TolerationExists:
			if t.Value != "" {
				return admission.NewForbidden(a, fmt.Errorf("%s: operator Exists matches any value; value must be empty (got %q)", field, t.Value))
			}
		default:
			return admission.NewForbidden(a, fmt.Errorf("%s.operator %q: want Equal or Exists", field, t.Operator))
		}
		if t.Key != "" {
			if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
				return admission.NewForbidden(a, fmt.Errorf("%s.key %q: %s", field, t.Key, strings.Join(errs, "; ")))
			}
		}
		switch t.Effect {
		case "", workload.TaintNoExecute:
		case workload.TaintNoSchedule, workload.TaintPreferNoSchedule:
			if t.TolerationSeconds != nil {
				return admission.NewForbidden(a, fmt.Errorf("%s: tolerationSeconds applies to NoExecute taints only, not %s", field, t.Effect))
			}
		default:
			return admission.NewForbidden(a, fmt.Errorf("%s.effect %q: want NoSchedule, PreferNoSchedule, NoExecute or empty (all)", field, t.Effect))
		}
		if t.Key == workload.TaintUnschedulable {
			return admission.NewForbidden(a, fmt.Errorf("%s: %s (cordon) cannot be tolerated: a cordoned SyncTarget gets no new namespaces, as its location decided", field, t.Key))
		}
	}
	if len(pl.Spec.Tolerations) == 0 {
		return nil
	}
	loc, err := logicalcluster.Parse(pl.Spec.LocationWorkspace)
	if err != nil {
		return nil // validatePlacement answers
	}
	for _, u := range p.locationTargets(ctx, loc) {
		taints, _ := decodeTaints(u)
		for _, taint := range taints {
			if taint.MayTolerate(string(cluster)) {
				continue
			}
			for i, t := range pl.Spec.Tolerations {
				if t.Key != "" && t.Matches(&taint) {
					who := "no workspace"
					if len(taint.TolerableBy) > 0 {
						who = strings.Join(taint.TolerableBy, ", ")
					}
					return admission.NewForbidden(a, fmt.Errorf("spec.tolerations[%d]: SyncTarget %s of %s reserves its taint %s (%s) for Placements of %s: Placements of %s may not tolerate it",
						i, u.GetName(), loc, taint.Key, taint.Effect, who, cluster))
				}
			}
		}
	}
	return nil
}

// locationTargets lists the SyncTargets of a location workspace.
func (p *Plugin) locationTargets(ctx context.Context, loc logicalcluster.Name) []*unstructured.Unstructured {
	st := p.state.Load()
	if st == nil {
		return nil
	}
	var out []*unstructured.Unstructured
	if st.targets != nil && st.targetsSynced() {
		objs, _ := st.targets.ByIndex(clusterinformer.ByCluster, string(loc))
		for _, o := range objs {
			out = append(out, o.(*unstructured.Unstructured))
		}
		return out
	}
	d, err := st.clients.Dynamic(loc)
	if err != nil {
		return nil
	}
	list, err := d.Resource(workload.SyncTargetsResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}
