// Package rbacescalation gives upstream's RBAC storage a rule resolver that
// follows kcp's sharing rules. Upstream refuses to store a Role or binding
// that grants more than its author holds, and reads the author's rules and
// the referenced role from storage; storage is per logical cluster, so
// outside root it would not see the ClusterRoles root shares with every
// cluster (admin, edit, view, cluster-admin): a namespace admin could not
// write a Role that admin entitles it to, and binding cluster-admin would
// answer 404 instead of 403.
package rbacescalation

import (
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericregistry "k8s.io/apiserver/pkg/registry/generic"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/registry/rbac/clusterrole"
	clusterrolepolicybased "k8s.io/kubernetes/pkg/registry/rbac/clusterrole/policybased"
	"k8s.io/kubernetes/pkg/registry/rbac/clusterrolebinding"
	clusterrolebindingpolicybased "k8s.io/kubernetes/pkg/registry/rbac/clusterrolebinding/policybased"
	"k8s.io/kubernetes/pkg/registry/rbac/role"
	rolepolicybased "k8s.io/kubernetes/pkg/registry/rbac/role/policybased"
	"k8s.io/kubernetes/pkg/registry/rbac/rolebinding"
	rolebindingpolicybased "k8s.io/kubernetes/pkg/registry/rbac/rolebinding/policybased"
	rbacregistryvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"

	"github.com/kcpsql/kcp/server/clusterrbac"
)

// WrapProviders replaces the storage of the RBAC provider in providers;
// authz must be the cluster-aware authorizer (it answers "escalate" and
// "bind" in the request's cluster).
func WrapProviders(providers []controlplaneapiserver.RESTStorageProvider, authz authorizer.Authorizer) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, len(providers))
	for i, p := range providers {
		if p.GroupName() == "rbac.authorization.k8s.io" {
			p = provider{RESTStorageProvider: p, authz: authz}
		}
		out[i] = p
	}
	return out
}

type provider struct {
	controlplaneapiserver.RESTStorageProvider
	authz authorizer.Authorizer
}

// PostStartHook replaces upstream's hook, which creates the bootstrap
// roles and bindings in root (the shared ones among them), with kcp's
// (bootstrapHook: the same policy and reconciliation, quicker at start-up).
// An embedded interface does not carry the methods of the type behind it,
// so the provider must say it has a hook.
func (p provider) PostStartHook() (string, genericapiserver.PostStartHookFunc, error) {
	return BootstrapHookName, bootstrapHook(), nil
}

func (p provider) NewRESTStorage(src serverstorage.APIResourceConfigSource, getter genericregistry.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := p.RESTStorageProvider.NewRESTStorage(src, getter)
	if err != nil {
		return info, err
	}
	for _, storage := range info.VersionedResourcesStorageMap {
		roles, _ := storage["roles"].(*rolepolicybased.Storage)
		roleBindings, _ := storage["rolebindings"].(*rolebindingpolicybased.Storage)
		clusterRoles, _ := storage["clusterroles"].(*clusterrolepolicybased.Storage)
		clusterRoleBindings, _ := storage["clusterrolebindings"].(*clusterrolebindingpolicybased.Storage)
		if roles == nil || roleBindings == nil || clusterRoles == nil || clusterRoleBindings == nil {
			continue
		}
		resolver := rbacregistryvalidation.NewDefaultRuleResolver(
			role.AuthorizerAdapter{Registry: role.NewRegistry(roles.StandardStorage)},
			rolebinding.AuthorizerAdapter{Registry: rolebinding.NewRegistry(roleBindings.StandardStorage)},
			clusterrbac.SharedClusterRoles{Own: clusterrole.AuthorizerAdapter{Registry: clusterrole.NewRegistry(clusterRoles.StandardStorage)}},
			clusterrbac.SharedClusterRoleBindings{Own: clusterrolebinding.AuthorizerAdapter{Registry: clusterrolebinding.NewRegistry(clusterRoleBindings.StandardStorage)}},
		)
		storage["roles"] = rolepolicybased.NewStorage(roles.StandardStorage, p.authz, resolver)
		storage["rolebindings"] = rolebindingpolicybased.NewStorage(roleBindings.StandardStorage, p.authz, resolver)
		storage["clusterroles"] = clusterrolepolicybased.NewStorage(clusterRoles.StandardStorage, p.authz, resolver)
		storage["clusterrolebindings"] = clusterrolebindingpolicybased.NewStorage(clusterRoleBindings.StandardStorage, p.authz, resolver)
	}
	return info, nil
}
