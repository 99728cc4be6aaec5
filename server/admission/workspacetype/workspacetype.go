// Package workspacetype is the admission side of WorkspaceTypes
// (tenancy.kcp.io/v1alpha1):
//
//   - a new Workspace with spec.type gets the type resolved: the
//     WorkspaceType of that name in the Workspace's parent, else in the
//     nearest ancestor that has one; a type found nowhere is refused
//     (rather than accepted and ignored);
//   - the creator must have the verb "bind" on every APIExport the type
//     binds by default, as binding by hand would need: a type cannot give
//     anyone an API its provider did not grant them;
//   - the resolved type and its bindings are recorded on the Workspace
//     (tenancy.kcp.io/type), which the workspace controller follows; the
//     record is kcp's: a client's value is replaced on create and kept from
//     changing afterwards.
package workspacetype

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/admission/apibinding"
	"github.com/kcpsql/kcp/server/admission/record"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/WorkspaceType"

// Plugin is the admission plugin; Start gives it its clients.
type Plugin struct {
	*admission.Handler
	authz   authorizer.Authorizer
	clients atomic.Pointer[clusterinformer.Clients]
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}

// Register adds the plugin to a plugin registry (one instance per process).
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// Start gives the plugin the loopback clients with which it reads types.
func Start(loopback *rest.Config) error {
	c, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	instance.clients.Store(c)
	return nil
}

// SetAuthorizer receives the server's (cluster-aware) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// ValidateInitialization fails when no authorizer was given.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s needs an authorizer", PluginName)
	}
	return nil
}

var (
	_ admission.MutationInterface   = &Plugin{}
	_ admission.ValidationInterface = &Plugin{}
)

// Admit records the resolved type on a new Workspace and keeps the record
// of an existing one.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" || a.GetResource().GroupResource() != tenancy.WorkspacesResource.GroupResource() {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return err
	}
	value := ""
	switch a.GetOperation() {
	case admission.Create:
		_, value, err = p.record(ctx, a)
		if err != nil {
			return err
		}
	case admission.Update:
		if value, err = record.Previous(a, tenancy.TypeAnnotation); err != nil {
			return err
		}
	}
	record.Set(obj, tenancy.TypeAnnotation, value)
	return nil
}

// Validate checks, on create, that the record is still what kcp resolved
// (no later mutation changed it) and that the creator may bind every
// default export; on update, that the record did not change.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" || a.GetResource().GroupResource() != tenancy.WorkspacesResource.GroupResource() {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return err
	}
	got := obj.GetAnnotations()[tenancy.TypeAnnotation]
	switch a.GetOperation() {
	case admission.Update:
		prev, err := record.Previous(a, tenancy.TypeAnnotation)
		if err != nil {
			return err
		}
		if got != prev {
			return admission.NewForbidden(a, fmt.Errorf("the annotation %s is kcp's record of the workspace's type and cannot be changed", tenancy.TypeAnnotation))
		}
		return nil
	case admission.Create:
		rt, want, err := p.record(ctx, a)
		if err != nil {
			return err
		}
		if got != want {
			return admission.NewForbidden(a, fmt.Errorf("the annotation %s is kcp's record of the workspace's type and cannot be set", tenancy.TypeAnnotation))
		}
		if rt == nil {
			return nil
		}
		for _, b := range rt.Bindings {
			if err := apibinding.MayBind(ctx, p.authz, a.GetUserInfo(), b.Path, b.Export); err != nil {
				return admission.NewForbidden(a, fmt.Errorf("workspaces of type %s (defined in %s) bind APIExport %s of %s by default: %v", rt.Name, rt.Path, b.Export, b.Path, err))
			}
		}
	}
	return nil
}

// record resolves the type of a new Workspace and returns it with the
// annotation value that records it ("" and nil: no type).
func (p *Plugin) record(ctx context.Context, a admission.Attributes) (*tenancy.ResolvedType, string, error) {
	parent, ok := logicalcluster.From(ctx)
	if !ok || parent.IsWildcard() {
		return nil, "", nil
	}
	rt, err := p.resolve(ctx, parent, typeOf(a.GetObject()))
	if err != nil {
		return nil, "", admission.NewForbidden(a, err)
	}
	if rt == nil {
		return nil, "", nil
	}
	raw, err := json.Marshal(rt)
	if err != nil {
		return nil, "", err
	}
	return rt, string(raw), nil
}

func typeOf(obj runtime.Object) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		t, _, _ := unstructured.NestedString(u.Object, "spec", "type")
		return t
	}
	return ""
}

// resolve finds the WorkspaceType name in parent or its nearest ancestor
// that defines it; nil for no type.
func (p *Plugin) resolve(ctx context.Context, parent logicalcluster.Name, name string) (*tenancy.ResolvedType, error) {
	if name == "" {
		return nil, nil
	}
	clients := p.clients.Load()
	if clients == nil {
		return nil, fmt.Errorf("workspace types are not available yet (the server is starting); try again")
	}
	var searched []string
	for c, ok := parent, true; ok; c, ok = c.Parent() {
		d, err := clients.Dynamic(c)
		if err != nil {
			return nil, err
		}
		u, err := d.Resource(tenancy.WorkspaceTypesResource).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			searched = append(searched, string(c))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading WorkspaceType %s in %s: %v", name, c, err)
		}
		var wt tenancy.WorkspaceType
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wt); err != nil {
			return nil, fmt.Errorf("reading WorkspaceType %s in %s: %v", name, c, err)
		}
		return &tenancy.ResolvedType{Path: string(c), Name: name, Bindings: slices.Clone(wt.Spec.DefaultAPIBindings)}, nil
	}
	return nil, fmt.Errorf("spec.type: no WorkspaceType %q in %v (a type can be used in the workspace that defines it and below; kubectl get workspacetypes lists those of a workspace)", name, searched)
}
