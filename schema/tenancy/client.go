package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/conditions"
)

// CreateWorkspace creates the Workspace name (of type wsType, may be empty)
// through a client of the parent cluster and waits until it is Ready. With
// existingOK, a Workspace that already exists is waited for instead.
func CreateWorkspace(ctx context.Context, parent dynamic.Interface, name, wsType string, existingOK bool, timeout time.Duration) error {
	ws := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": Group + "/" + Version, "kind": "Workspace",
		"metadata": map[string]interface{}{"name": name},
	}}
	if wsType != "" {
		ws.Object["spec"] = map[string]interface{}{"type": wsType}
	}
	res := parent.Resource(WorkspacesResource)
	if _, err := res.Create(ctx, ws, metav1.CreateOptions{}); err != nil && !(existingOK && apierrors.IsAlreadyExists(err)) {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		got, err := res.Get(ctx, name, metav1.GetOptions{})
		phase, why := "", ""
		if err == nil {
			phase, _, _ = unstructured.NestedString(got.Object, "status", "phase")
			if phase == PhaseReady {
				return nil
			}
			c, _ := conditions.Find(got, "Ready")
			why = c.Message
		} else {
			why = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workspace %q is not ready after %s (phase %q): %s", name, timeout, phase, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SetFrozen freezes the Workspace name (reason not empty) or unfreezes it
// (reason empty) through a client of its parent cluster, and waits until
// its Frozen condition says so (the workspace controller reports it as it
// copies the freeze to the workspace's logical cluster).
func SetFrozen(ctx context.Context, parent dynamic.Interface, name, reason string, timeout time.Duration) error {
	patch := []byte(`{"spec":{"frozen":null}}`)
	if reason != "" {
		raw, err := json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"frozen": Frozen{Reason: reason}}})
		if err != nil {
			return err
		}
		patch = raw
	}
	res := parent.Resource(WorkspacesResource)
	if _, err := res.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		got, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c, found := conditions.Find(got, ConditionFrozen)
		if (reason == "" && !found) || (reason != "" && found && c.Status == string(metav1.ConditionTrue) && c.Message == reason) {
			return nil
		}
		if time.Now().After(deadline) {
			phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
			return fmt.Errorf("workspace %q (phase %q) does not report the change after %s; it goes on in the background", name, phase, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
