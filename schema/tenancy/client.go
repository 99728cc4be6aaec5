package tenancy

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
