// Package logicalclusterprotection is the admission plugin that keeps every
// LogicalCluster object read-only for everyone but kcp itself. The
// LogicalCluster lives inside the cluster it describes, but everything on it
// is decided by the parent: who owns the workspace (the owner annotation the
// authorizer trusts), which Workspace it belongs to, its phase (Terminating
// closes the cluster to everyone) and its existence (no object, no cluster).
// A tenant admin who could write it could make someone else owner, or lock
// the operators out; so no field of it, no subresource, and no delete is
// open to tenants.
package logicalclusterprotection

import (
	"context"
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/shards"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/LogicalClusterProtection"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}, nil
	})
}

type plugin struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &plugin{}

// Validate lets only the server's own loopback identity and the other
// shards write. The name system:apiserver and the group system:kcp:shards
// cannot be claimed by a tenant: the authorizer refuses to let anyone
// outside root impersonate them (clusterauthz).
func (p *plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != tenancy.LogicalClustersResource.GroupResource() {
		return nil
	}
	if u := a.GetUserInfo(); u != nil && (u.GetName() == user.APIServerUser || slices.Contains(u.GetGroups(), shards.PeersGroup)) {
		// kcp itself, or the shard holding the parent of a workspace
		// that lives on this one.
		return nil
	}
	what := "logicalclusters/" + a.GetName()
	if a.GetSubresource() != "" {
		what += "/" + a.GetSubresource()
	}
	return errors.NewForbidden(a.GetResource().GroupResource(), a.GetName(),
		fmt.Errorf("%s of %s is reserved to kcp: the LogicalCluster is managed from the parent workspace "+
			"(change the Workspace there, or delete it to delete this cluster)", a.GetOperation(), what))
}
