package apibinding

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
	// deleteObjects deletes a cluster's objects of the definitions and
	// returns how many were there.
	deleteObjects func(ctx context.Context, cluster logicalcluster.Name, defs []*apiextensionsv1.CustomResourceDefinition) (int, error)
	// removeFinalizer takes the binding finalizer off a binding.
	removeFinalizer func(ctx context.Context, cluster logicalcluster.Name, obj *unstructured.Unstructured) error
	bindings        func(logicalcluster.Name) []*boundapis.Binding
	export          func(logicalcluster.Name, string) (*boundapis.Export, error)
	object          func(binding bool, cluster logicalcluster.Name, name string) (*unstructured.Unstructured, bool)
	patchStatus     func(ctx context.Context, binding bool, cluster logicalcluster.Name, name string, patch []byte) error
}

func (r *reconciler) reconcile(ctx context.Context, k key) (time.Duration, error) {
	obj, ok := r.object(k.binding, k.cluster, k.name)
	if !ok {
		return 0, nil
	}
	if obj.GetDeletionTimestamp() != nil {
		if !k.binding || !slices.Contains(obj.GetFinalizers(), apis.BindingFinalizer) {
			return 0, nil
		}
		return r.unbind(ctx, k, obj)
	}
	return 0, r.status(ctx, k, obj)
}

// unbind deletes the workspace's objects of the binding's resources, then
// lets the binding go.
func (r *reconciler) unbind(ctx context.Context, k key, obj *unstructured.Unstructured) (time.Duration, error) {
	for _, b := range r.bindings(k.cluster) {
		if b.Name != k.name || !b.Bound {
			continue
		}
		n, err := r.deleteObjects(ctx, k.cluster, b.Definitions)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			return time.Second, nil // look again once they are gone (finalizers of their own)
		}
	}
	return 0, r.removeFinalizer(ctx, k.cluster, obj)
}

func (r *reconciler) status(ctx context.Context, k key, obj *unstructured.Unstructured) error {
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
	if resolved == nil {
		return e.Status // gone, or the index cannot say yet
	}
	st := apis.APIExportStatus{IdentityHash: resolved.Identity, Conditions: append([]metav1.Condition(nil), e.Status.Conditions...)}
	cond := metav1.Condition{Type: apis.ConditionReady, Status: metav1.ConditionTrue, Reason: "SchemasValid", Message: "every schema exists and is a valid definition", ObservedGeneration: e.Generation}
	switch {
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSchema", err.Error()
	case len(resolved.Definitions) == 0:
		cond.Message = "the export names no schema yet (spec.latestResourceSchemas)"
	}
	setCondition(&st.Conditions, cond)
	return st
}

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
