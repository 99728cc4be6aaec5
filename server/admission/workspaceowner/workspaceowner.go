// Package workspaceowner is the admission plugin that records who created a
// Workspace or a WorkspaceRestore (tenancy.kcp.io/owner) and keeps that
// record from changing. The
// workspace controller makes the owner admin of the new logical cluster. It
// also puts the workspace controller's finalizer on a new Workspace, so that
// the controller need not write the Workspace once more to add it, and keeps
// tenants from removing it: without it a Workspace could be deleted while
// its logical cluster and data live on.
package workspaceowner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/admission/record"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/WorkspaceOwner"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
	})
}

// Owner is the recorded creator.
type Owner struct {
	Username string   `json:"username"`
	UID      string   `json:"uid,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

type plugin struct {
	*admission.Handler
}

var _ admission.MutationInterface = &plugin{}

// owned are the resources whose creator is recorded.
func owned(a admission.Attributes) bool {
	gr := a.GetResource().GroupResource()
	return a.GetSubresource() == "" && (gr == tenancy.WorkspacesResource.GroupResource() || gr == tenancy.WorkspaceRestoresResource.GroupResource() || gr == tenancy.WorkspaceMovesResource.GroupResource())
}

func (p *plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !owned(a) {
		return nil
	}
	isWorkspace := a.GetResource().GroupResource() == tenancy.WorkspacesResource.GroupResource()
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return err
	}
	value := ""
	switch a.GetOperation() {
	case admission.Create:
		if value, err = ownerValue(a.GetUserInfo()); err != nil {
			return err
		}
		if isWorkspace && !slices.Contains(obj.GetFinalizers(), tenancy.WorkspaceFinalizer) {
			obj.SetFinalizers(append(obj.GetFinalizers(), tenancy.WorkspaceFinalizer))
		}
	case admission.Update:
		old, err := meta.Accessor(a.GetOldObject())
		if err != nil {
			return err
		}
		value = old.GetAnnotations()[tenancy.OwnerAnnotation]
		if isWorkspace {
			keepSystemFinalizers(a.GetUserInfo(), old.GetFinalizers(), obj)
		}
	}
	record.Set(obj, tenancy.OwnerAnnotation, value)
	return nil
}

func ownerValue(u user.Info) (string, error) {
	raw, err := json.Marshal(Owner{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()})
	return string(raw), err
}

var _ admission.ValidationInterface = &plugin{}

// Validate refuses a Workspace whose owner record is not the one Admit
// wrote: a mutating webhook of the parent's tenant runs after this plugin
// and could otherwise name someone else as the owner.
func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !owned(a) {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return err
	}
	want := ""
	switch a.GetOperation() {
	case admission.Create:
		if want, err = ownerValue(a.GetUserInfo()); err != nil {
			return err
		}
	case admission.Update:
		if want, err = record.Previous(a, tenancy.OwnerAnnotation); err != nil {
			return err
		}
	default:
		return nil
	}
	if obj.GetAnnotations()[tenancy.OwnerAnnotation] != want {
		return admission.NewForbidden(a, fmt.Errorf("the annotation %s is kcp's record of who created the object and cannot be set or changed", tenancy.OwnerAnnotation))
	}
	return nil
}

// keepSystemFinalizers puts back the workspace controller's finalizer when
// anyone but kcp itself or an operator (system:masters) removes it: only the
// controller knows when the logical cluster is gone. The update goes on with
// the rest of the change, so `{"metadata":{"finalizers":null}}` is a no-op
// for the finalizer rather than an error a client might retry forever.
func keepSystemFinalizers(u user.Info, old []string, obj metav1.Object) {
	if u != nil && (u.GetName() == user.APIServerUser || slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)) {
		return
	}
	if slices.Contains(old, tenancy.WorkspaceFinalizer) && !slices.Contains(obj.GetFinalizers(), tenancy.WorkspaceFinalizer) {
		obj.SetFinalizers(append(obj.GetFinalizers(), tenancy.WorkspaceFinalizer))
	}
}
