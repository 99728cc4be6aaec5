package apibinding

import (
	"context"
	"encoding/json"
	"reflect"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

var metav1PatchOptions = metav1.PatchOptions{FieldManager: name}

type reconciler struct {
	bindings    func(logicalcluster.Name) []*boundapis.Binding
	export      func(logicalcluster.Name, string) (*boundapis.Export, error)
	object      func(binding bool, cluster logicalcluster.Name, name string) (*unstructured.Unstructured, bool)
	patchStatus func(ctx context.Context, binding bool, cluster logicalcluster.Name, name string, patch []byte) error
}

func (r *reconciler) reconcile(ctx context.Context, k key) error {
	obj, ok := r.object(k.binding, k.cluster, k.name)
	if !ok || obj.GetDeletionTimestamp() != nil {
		return nil
	}
	var current, want any
	if k.binding {
		var b apis.APIBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b); err != nil {
			return nil
		}
		var resolved *boundapis.Binding
		for _, x := range r.bindings(k.cluster) {
			if x.Name == k.name {
				resolved = x
			}
		}
		if resolved == nil {
			return nil
		}
		current, want = b.Status, bindingStatus(&b, resolved)
	} else {
		var e apis.APIExport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &e); err != nil {
			return nil
		}
		resolved, err := r.export(k.cluster, k.name)
		current, want = e.Status, exportStatus(&e, resolved, err)
	}
	if reflect.DeepEqual(current, want) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": want})
	if err != nil {
		return err
	}
	return r.patchStatus(ctx, k.binding, k.cluster, k.name, patch)
}

// bindingStatus is what a binding's status should say.
func bindingStatus(b *apis.APIBinding, r *boundapis.Binding) apis.APIBindingStatus {
	st := apis.APIBindingStatus{Phase: apis.PhaseBinding, IdentityHash: r.Identity, BoundResources: r.Resources,
		ExportClaims: r.ExportClaims, AcceptedClaims: r.Claims, Conditions: append([]metav1.Condition(nil), b.Status.Conditions...)}
	cond := metav1.Condition{Type: apis.ConditionBound, Status: metav1.ConditionFalse, Reason: r.Reason, Message: r.Message, ObservedGeneration: b.Generation}
	if r.Bound {
		st.Phase, cond.Status = apis.PhaseBound, metav1.ConditionTrue
	}
	setCondition(&st.Conditions, cond)
	return st
}

// exportStatus is what an export's status should say.
func exportStatus(e *apis.APIExport, resolved *boundapis.Export, err error) apis.APIExportStatus {
	st := apis.APIExportStatus{IdentityHash: apis.Identity(clusterOf(e), e.Name, e.UID), Conditions: append([]metav1.Condition(nil), e.Status.Conditions...)}
	cond := metav1.Condition{Type: apis.ConditionReady, Status: metav1.ConditionTrue, Reason: "SchemasValid", Message: "every schema exists and is a valid definition", ObservedGeneration: e.Generation}
	switch {
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSchema", err.Error()
	case resolved == nil:
		return e.Status
	case len(resolved.Definitions) == 0:
		cond.Message = "the export names no schema yet (spec.latestResourceSchemas)"
	}
	setCondition(&st.Conditions, cond)
	return st
}

func clusterOf(e *apis.APIExport) string { return e.Annotations[logicalcluster.Annotation] }

// setCondition sets c, keeping the transition time when the status did not
// change.
func setCondition(conds *[]metav1.Condition, c metav1.Condition) {
	if old := apimeta.FindStatusCondition(*conds, c.Type); old != nil && old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	} else {
		c.LastTransitionTime = metav1.Now()
	}
	apimeta.SetStatusCondition(conds, c)
}
