// Package apibinding is the admission side of API sharing (apis.kcp.io):
//
//   - creating an APIBinding needs the verb "bind" on the APIExport it
//     names, checked with the requester's identity in the export's
//     workspace (ordinary RBAC there decides); a requester without it is
//     refused whether or not the export exists, so a binding cannot probe
//     another workspace;
//   - a new APIBinding gets the finalizer under which unbinding deletes the
//     workspace's objects of the bound resources;
//   - a CustomResourceDefinition cannot take the name of a resource an
//     APIBinding already serves in the workspace: it would hide the bound
//     objects;
//   - an APIExport that workspaces bind cannot be deleted, nor an
//     APIResourceSchema an APIExport of its workspace lists: either would
//     leave the consumers' objects stored but unreachable (and unbinding
//     could no longer delete them). Consumers unbind first;
//   - for the same reason a Workspace cannot be deleted while an APIExport
//     in it, or in a workspace below it, is bound by a workspace outside
//     that tree. The server's own cascade (deleting the children of a
//     workspace whose deletion was admitted) is not held back.
package apibinding

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/server/requester"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/APIBinding"

// BoundFunc tells which binding serves a definition name in a cluster.
type BoundFunc func(cluster logicalcluster.Name, name string) (binding string, export apis.ExportName, ok bool)

// Users tells who depends on an export or a schema.
type Users struct {
	// Consumers are the workspaces with a binding of the export.
	Consumers func(provider logicalcluster.Name, export string) []logicalcluster.Name
	// ExportsUsing are the exports of the workspace that list the schema.
	ExportsUsing func(provider logicalcluster.Name, schema string) []string
	// ConsumersOutside are, per export of the workspace tree under root,
	// the workspaces outside the tree that bind it.
	ConsumersOutside func(root logicalcluster.Name) map[apis.ExportName][]logicalcluster.Name
	// HoldsExports reports whether the workspace tree under root holds an
	// APIExport (on this shard).
	HoldsExports func(root logicalcluster.Name) bool
	// Unknown names the other shards whose bindings are not known yet
	// (not reached since this shard started): who binds an export there
	// cannot be told.
	Unknown func() []string
}

// unknownConsumers refuses deleting what workspaces of a shard not reached
// yet may bind: deleting it would leave their objects unreachable.
func unknownConsumers(a admission.Attributes, u *Users, what string) error {
	if u.Unknown == nil {
		return nil
	}
	if shards := u.Unknown(); len(shards) > 0 {
		return admission.NewForbidden(a, fmt.Errorf("%s cannot be deleted now: shard(s) %s have not been reached since this shard started, so whether workspaces there bind its APIs is not known; try again once they answer",
			what, strings.Join(shards, ", ")))
	}
	return nil
}

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
	authz authorizer.Authorizer
	bound atomic.Pointer[BoundFunc]
	// reserved tells the groups the server serves itself.
	reserved atomic.Pointer[func(string) bool]
	users    atomic.Pointer[Users]
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create, admission.Delete)}

var _ admission.MutationInterface = &Plugin{}

// Admit gives a new APIBinding the finalizer under which unbinding deletes
// the bound objects of the workspace (as deleting a CRD deletes its
// objects): without it, they would stay in the export's key range and the
// provider's view would still show them.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetOperation() != admission.Create || a.GetSubresource() != "" || a.GetResource().GroupResource() != apis.BindingsResource.GroupResource() {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return nil
	}
	if !slices.Contains(obj.GetFinalizers(), apis.BindingFinalizer) {
		obj.SetFinalizers(append(obj.GetFinalizers(), apis.BindingFinalizer))
	}
	return nil
}

// Register adds the plugin to a plugin registry (one instance per process).
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// SetReserved gives the plugin the groups the server serves itself.
func SetReserved(f func(group string) bool) { instance.reserved.Store(&f) }

// checkSchemaGroup refuses an APIResourceSchema of a group that kcp or
// Kubernetes serves itself: bound, it would name the built-in resource,
// and the export's view would reach the built-in objects of every
// consumer (Workspaces, APIBindings, Secrets) instead of the export's.
func (p *Plugin) checkSchemaGroup(a admission.Attributes) error {
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	served := false
	if f := p.reserved.Load(); f != nil {
		served = (*f)(group)
	}
	if apis.ReservedGroup(group) || served {
		return admission.NewForbidden(a, fmt.Errorf("spec.group %q is an API group of Kubernetes or kcp (or one this server serves itself); an APIResourceSchema defines an API of your own, in a group of your own domain like example.com", group))
	}
	return nil
}

// SetBound gives the plugin the bound definitions of each cluster.
func SetBound(f BoundFunc) { instance.bound.Store(&f) }

// RemoteBindFunc decides the verb "bind" on an APIExport of a workspace
// on another shard, by that shard's RBAC (handled false: the workspace is
// on this one). allowed false without an error is a refusal; an error says
// it could not be decided now.
type RemoteBindFunc func(ctx context.Context, who user.Info, provider logicalcluster.Name, export string) (handled, allowed bool, err error)

// remoteBind, when set, decides binding an export of another shard.
var remoteBind atomic.Pointer[RemoteBindFunc]

// SetRemoteBind gives the plugin the check of exports on other shards.
func SetRemoteBind(f RemoteBindFunc) { remoteBind.Store(&f) }

// SetUsers gives the plugin who depends on exports and schemas.
func SetUsers(u Users) { instance.users.Store(&u) }

// SetAuthorizer receives the server's (cluster-aware) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// ValidateInitialization fails when no authorizer was given.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s needs an authorizer", PluginName)
	}
	return nil
}

var _ admission.ValidationInterface = &Plugin{}

// Validate checks the bind permission of a new APIBinding and the name of
// a new CRD.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster.IsWildcard() {
		return nil
	}
	if a.GetOperation() == admission.Delete {
		return p.checkInUse(a, cluster)
	}
	switch a.GetResource().GroupResource() {
	case apis.BindingsResource.GroupResource():
		return p.checkBind(ctx, a)
	case apis.SchemasResource.GroupResource():
		return p.checkSchemaGroup(a)
	case apiextensionsv1.Resource("customresourcedefinitions"):
		f := p.bound.Load()
		if f == nil {
			return nil
		}
		if binding, export, ok := (*f)(cluster, a.GetName()); ok {
			return admission.NewForbidden(a, fmt.Errorf("%s is served in this workspace by APIBinding %s (APIExport %s in %s); delete the binding first or choose another group", a.GetName(), binding, export.Name, export.Path))
		}
	}
	return nil
}

// deletedName is the name of the object a delete removes. A collection
// delete is admitted object by object with the collection's attributes,
// whose name is empty: the name is the old object's then.
func deletedName(a admission.Attributes) string {
	if a.GetName() != "" {
		return a.GetName()
	}
	if old := a.GetOldObject(); old != nil {
		if m, err := meta.Accessor(old); err == nil {
			return m.GetName()
		}
	}
	return ""
}

// checkInUse refuses deleting an export with bindings, a schema an export
// lists and a workspace whose tree has an export bound from outside it.
func (p *Plugin) checkInUse(a admission.Attributes, cluster logicalcluster.Name) error {
	u := p.users.Load()
	if u == nil {
		return nil
	}
	name := deletedName(a)
	switch a.GetResource().GroupResource() {
	case apis.ExportsResource.GroupResource():
		if consumers := u.Consumers(cluster, name); len(consumers) > 0 {
			slices.Sort(consumers)
			more := ""
			if u.Unknown != nil {
				if shards := u.Unknown(); len(shards) > 0 {
					more = fmt.Sprintf(" (and shard(s) %s have not been reached since this shard started: workspaces there may bind it too)", strings.Join(shards, ", "))
				}
			}
			return admission.NewForbidden(a, fmt.Errorf("APIExport %s is bound by %s%s; deleting it would leave their objects stored but unreachable: each must delete its APIBinding first, which deletes its objects",
				name, someOf(consumers), more))
		}
		return unknownConsumers(a, u, "APIExport "+name)
	case tenancy.WorkspacesResource.GroupResource():
		if u.ConsumersOutside == nil || (a.GetUserInfo() != nil && a.GetUserInfo().GetName() == user.APIServerUser) {
			return nil
		}
		tree := cluster.Join(name)
		used := u.ConsumersOutside(tree)
		if len(used) == 0 {
			// Workspaces on a shard not reached yet may bind the tree's
			// exports: deleting it could strand their objects.
			if u.HoldsExports != nil && u.HoldsExports(tree) {
				return unknownConsumers(a, u, fmt.Sprintf("workspace %s, which holds APIExports,", tree))
			}
			return nil
		}
		exports := slices.SortedFunc(maps.Keys(used), func(x, y apis.ExportName) int {
			return cmp.Or(cmp.Compare(x.Path, y.Path), cmp.Compare(x.Name, y.Name))
		})
		var which []string
		for _, e := range exports[:min(len(exports), 3)] {
			which = append(which, fmt.Sprintf("APIExport %s of %s is bound by %s", e.Name, e.Path, someOf(used[e])))
		}
		if len(exports) > 3 {
			which = append(which, fmt.Sprintf("%d more APIExport(s)", len(exports)-3))
		}
		return admission.NewForbidden(a, fmt.Errorf("workspace %s cannot be deleted while workspaces outside it bind its APIs (%s); deleting it would leave their objects stored but unreachable: each must delete its APIBinding first, which deletes its objects",
			tree, strings.Join(which, "; ")))
	case apis.SchemasResource.GroupResource():
		if exports := u.ExportsUsing(cluster, name); len(exports) > 0 {
			return admission.NewForbidden(a, fmt.Errorf("APIResourceSchema %s is served by APIExport(s) %v of this workspace; switch them to another schema (spec.latestResourceSchemas) or delete them first",
				name, exports))
		}
	}
	return nil
}

// someOf names consumers, at most five of them, with their number:
// "2 workspace(s) ([root:a root:b])".
func someOf(consumers []logicalcluster.Name) string {
	shown := consumers[:min(len(consumers), 5)]
	return fmt.Sprintf("%d workspace(s) (%v)", len(consumers), shown)
}

func (p *Plugin) checkBind(ctx context.Context, a admission.Attributes) error {
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		if _, err := meta.Accessor(a.GetObject()); err != nil {
			return admission.NewForbidden(a, fmt.Errorf("unexpected object %T", a.GetObject()))
		}
		return nil
	}
	path, _, _ := unstructured.NestedString(u.Object, "spec", "reference", "export", "path")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "reference", "export", "name")
	if err := MayBind(ctx, p.authz, a.GetUserInfo(), path, name); err != nil {
		return admission.NewForbidden(a, err)
	}
	return nil
}

// MayBind checks that u, and the identity u's request authenticated as
// if it impersonates u, have the verb "bind" on the APIExport name of the
// workspace path, in that workspace's RBAC. A missing workspace or export
// gives the same error as a missing grant.
func MayBind(ctx context.Context, authz authorizer.Authorizer, u user.Info, path, name string) error {
	provider, err := logicalcluster.Parse(path)
	if err != nil || provider.IsWildcard() {
		return fmt.Errorf("%q is not a workspace path (like root:platform)", path)
	}
	// Checked in the provider's workspace for the identity the request
	// acts as and, when it impersonates, the one it proved (impersonation
	// was authorized in the requester's workspace only); by the shard
	// that holds the provider's workspace when it is another.
	for _, who := range requester.Both(ctx, u) {
		attr := authorizer.AttributesRecord{
			User: who, Verb: apis.VerbBind, APIGroup: apis.Group, APIVersion: apis.Version,
			Resource: "apiexports", Name: name, ResourceRequest: true,
		}
		allowed, handled := false, false
		if f := remoteBind.Load(); f != nil && who != nil {
			var err error
			handled, allowed, err = (*f)(ctx, who, provider, name)
			if handled && err != nil {
				return fmt.Errorf("binding APIExport %s of workspace %s cannot be checked now: %v", name, path, err)
			}
		}
		if !handled {
			d, _, err := authz.Authorize(clusterauthz.WithExportGrant(logicalcluster.WithCluster(ctx, provider)), attr)
			allowed = err == nil && d == authorizer.DecisionAllow
		}
		if !allowed {
			name := ""
			if who != nil {
				name = who.GetName()
			}
			return fmt.Errorf("%q may not bind APIExport %s of workspace %s: binding needs the verb %q on apiexports/%s in that workspace (granted with RBAC there), or the workspace does not exist",
				name, attr.Name, path, apis.VerbBind, attr.Name)
		}
	}
	return nil
}
