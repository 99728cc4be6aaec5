// Package workspaceshard is the admission plugin that decides on which
// shard a new workspace lives (spec.shard of a Workspace):
//
//   - in an installation of one server (no --shards-file) spec.shard is
//     refused: there is no other shard, and a field that is accepted and
//     then ignored would be a lie;
//   - a name that is not in the shards file is refused, with the names that
//     are;
//   - without spec.shard a new workspace goes where --workspace-shard says,
//     else where --workspace-shard-policy chooses: the shard of its parent
//     (parent, the default, which needs no call between shards) or the
//     shard holding the fewest workspaces (least-full); the choice is
//     recorded in spec.shard;
//   - spec.shard never changes afterwards by an edit: a WorkspaceMove
//     moves a workspace, and its controller (kcp's own identity) records
//     the new shard.
package workspaceshard

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/shards"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/WorkspaceShard"

type plugin struct {
	*admission.Handler
	m *shards.Membership
	// defaultShard is where a workspace without spec.shard goes ("": as
	// policy says).
	defaultShard *string
	// policy is --workspace-shard-policy (shards.Policies; "": parent).
	policy *string

	leastFullOnce sync.Once
	leastFull     *shards.LeastFull
}

// Register adds the plugin; m and defaultShard are filled in when the
// options are completed.
func Register(plugins *admission.Plugins, m *shards.Membership, defaultShard, policy *string) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), m: m, defaultShard: defaultShard, policy: policy}, nil
	})
}

var (
	_ admission.MutationInterface   = &plugin{}
	_ admission.ValidationInterface = &plugin{}
)

func (p *plugin) applies(a admission.Attributes) bool {
	return a.GetResource().GroupResource() == tenancy.WorkspacesResource.GroupResource() && a.GetSubresource() == ""
}

func shardOf(obj interface{}) (*unstructured.Unstructured, string) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u == nil {
		return nil, ""
	}
	s, _, _ := unstructured.NestedString(u.Object, "spec", "shard")
	return u, s
}

// Admit records the shard of a new workspace.
func (p *plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !p.applies(a) || a.GetOperation() != admission.Create || !p.m.Sharded() {
		return nil
	}
	u, s := shardOf(a.GetObject())
	if u == nil || s != "" {
		return nil
	}
	s = p.m.Self
	switch {
	case p.defaultShard != nil && *p.defaultShard != "":
		s = *p.defaultShard
	case p.policy != nil && *p.policy == shards.PolicyLeastFull:
		p.leastFullOnce.Do(func() { p.leastFull = shards.NewLeastFull(p.m) })
		var counts map[string]int64
		s, counts = p.leastFull.Choose(ctx)
		klog.V(2).InfoS("new workspace placed on the least full shard", "workspace", a.GetName(), "shard", s, "workspaces", counts)
	}
	return unstructured.SetNestedField(u.Object, s, "spec", "shard")
}

// Validate refuses a shard that does not exist and any change of one.
func (p *plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !p.applies(a) {
		return nil
	}
	_, s := shardOf(a.GetObject())
	path := field.NewPath("spec", "shard")
	invalid := func(msg string) error {
		return apierrors.NewInvalid(schemaKind(), a.GetName(), field.ErrorList{field.Invalid(path, s, msg)})
	}
	if a.GetOperation() == admission.Update {
		_, old := shardOf(a.GetOldObject())
		if old != s && a.GetUserInfo() != nil && a.GetUserInfo().GetName() == user.APIServerUser {
			// A WorkspaceMove records the shard it moved the workspace to
			// (server/controllers/workspacemove).
			if _, ok := p.m.Config.Get(s); p.m.Sharded() && ok {
				return nil
			}
		}
		if old != s {
			return apierrors.NewInvalid(schemaKind(), a.GetName(), field.ErrorList{field.Forbidden(path,
				fmt.Sprintf("the shard of a workspace cannot change (it is %q); moving a workspace to another shard is a WorkspaceMove (docs/operations.md)", old))})
		}
		return nil
	}
	if s == "" {
		return nil
	}
	if !p.m.Sharded() {
		return invalid("this kcp is one server, not one of several shards (kcp start --shards-file): remove spec.shard")
	}
	if _, ok := p.m.Config.Get(s); !ok {
		return invalid("no shard has this name; the shards are: " + strings.Join(p.m.Config.Names(), ", "))
	}
	return nil
}

func schemaKind() schema.GroupKind { return schema.GroupKind{Group: tenancy.Group, Kind: "Workspace"} }
