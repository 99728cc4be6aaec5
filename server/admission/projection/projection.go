// Package projection is the admission plugin that keeps projections
// read-only for tenants. A syncer writes what its physical cluster runs
// for a workspace (Pods, ReplicaSets, ControllerRevisions, Endpoints,
// EndpointSlices, Events) back into the workspace, labelled
// workload.kcp.io/projected-from=<target key> (schema/workload,
// server/syncerview/projected.go). Then:
//
//   - creating or updating (any subresource) a ReplicaSet,
//     ControllerRevision, Endpoints or EndpointSlice, or any object that
//     carries the projected-from label (before or after the change), is
//     refused with a message saying what these objects are and what to
//     create instead;
//   - except through the syncer view of the target the label names (the
//     request a view continued as system:kcp:syncer:<location>:<target>),
//     and for kcp's own controllers (system:masters, not a view: the
//     garbage collector removing an owner reference);
//   - deleting is not this plugin's business: deleting a projected Pod is
//     how a user restarts it (its syncer deletes the downstream Pod).
package projection

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/viewidentity"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/Projection"

// syncerPrefix starts the identity of the syncer view
// (server/syncerview): system:kcp:syncer:<location>:<target>.
const syncerPrefix = "system:kcp:syncer:"

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
	})
}

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &Plugin{}

// Validate refuses a tenant's write of a projection.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	gr := a.GetResource().GroupResource()
	newKey, newLabelled := labelOf(a.GetObject())
	oldKey, oldLabelled := "", false
	if a.GetOperation() == admission.Update {
		oldKey, oldLabelled = labelOf(a.GetOldObject())
	}
	if !workload.IsProjectedOnly(gr) && !newLabelled && !oldLabelled {
		return nil
	}
	u := a.GetUserInfo()
	if key, ok := viewKey(ctx, u); ok {
		if newKey == key && (!oldLabelled || oldKey == key) {
			return nil
		}
		return apierrors.NewForbidden(gr, a.GetName(), fmt.Errorf("the syncer of target %s may write only its own projections", key))
	}
	if u != nil && !viewidentity.Continued(ctx) && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return nil // kcp's own controllers (garbage collection)
	}
	return apierrors.NewForbidden(gr, a.GetName(), fmt.Errorf("%s", Message(gr.String())))
}

// Message explains a refused write of a projection.
func Message(what string) string {
	return fmt.Sprintf("%s: read-only in a workspace. ReplicaSets, ControllerRevisions, Endpoints, EndpointSlices, and Pods and Events "+
		"labelled %s, are what the physical clusters run for this workspace, written back by their syncers "+
		"(the label names the target, the annotation %s the cluster). Create or change the Deployment, StatefulSet, DaemonSet, Job or Service "+
		"instead (kubectl rollout undo for a revision); delete a projected Pod to restart it. See docs/multicluster.md (\"What runs, as the workspace sees it\")",
		what, workload.ProjectedFromLabel, workload.PhysicalClusterAnnotation)
}

// labelOf is an object's projected-from label.
func labelOf(obj interface{}) (string, bool) {
	if obj == nil {
		return "", false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	v, ok := m.GetLabels()[workload.ProjectedFromLabel]
	return v, ok
}

// viewKey is the target key of a request the syncer view continued.
func viewKey(ctx context.Context, u user.Info) (string, bool) {
	if u == nil || !viewidentity.Continued(ctx) {
		return "", false
	}
	rest, ok := strings.CutPrefix(u.GetName(), syncerPrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, ":")
	if i <= 0 || i == len(rest)-1 {
		return "", false
	}
	return workload.TargetKey(rest[:i], rest[i+1:]), true
}
