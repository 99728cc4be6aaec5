// Package pushsecret is the admission plugin that keeps push mode from
// being a confused deputy. A SyncTarget's spec.push names a Secret whose
// kubeconfig kcp then uses for the SyncTarget (server/controllers/pushsyncer):
// naming a Secret is using it. So whoever writes spec.push must be allowed
// to read that Secret:
//
//   - creating a SyncTarget with spec.push, and every update that changes
//     the Secret it names, needs the verb "get" on that Secret (its
//     namespace and name, in the SyncTarget's workspace), checked with the
//     requester's identity by the workspace's RBAC; a request a view
//     continued as its own identity (viewidentity) may not set it at all,
//     since the real requester is not known there;
//   - kcp records the Secret it checked on the SyncTarget
//     (workload.PushSecretCheckedAnnotation); the push-mode controller uses
//     only the recorded Secret, so a SyncTarget written before this check,
//     or with a record a client or a later mutation forged, runs no syncer
//     and shows nothing of the Secret. The record is kcp's: a client's value
//     is replaced, and a change after this plugin's mutation is refused;
//   - an update that keeps the reference is not checked again (the
//     reference was checked when it was written), except that an update
//     of a SyncTarget without a record, by someone who may read the Secret,
//     records it.
package pushsecret

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/admission/record"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/PushSecret"

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
	authz authorizer.Authorizer
}

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
	})
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

var syncTargets = workload.SyncTargetsResource.GroupResource()

// refOf reads spec.push of a SyncTarget as "<namespace>/<name>".
func refOf(obj runtime.Object) (ns, name string) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u == nil {
		return "", ""
	}
	ns, _, _ = unstructured.NestedString(u.Object, "spec", "push", "secretNamespace")
	name, _, _ = unstructured.NestedString(u.Object, "spec", "push", "secretName")
	return ns, name
}

func ref(ns, name string) string {
	return workload.PushSecretRef(&workload.PushSpec{SecretNamespace: ns, SecretName: name})
}

// decision is what the plugin decides for a request: the record the
// object must carry, and the Secret the requester must be allowed to get
// ("" name: none).
type decision struct {
	record        string
	checkNS       string
	checkName     string
	mustBeAllowed bool
}

// decide: on create or a changed reference, the new reference is
// recorded and must be allowed; else the old record stays, unless there is
// none that matches and the requester may read the Secret (then it is
// recorded).
func (p *Plugin) decide(ctx context.Context, a admission.Attributes) (decision, error) {
	ns, name := refOf(a.GetObject())
	now := ref(ns, name)
	if a.GetOperation() == admission.Create {
		return decision{record: now, checkNS: ns, checkName: name, mustBeAllowed: now != ""}, nil
	}
	oldNS, oldName := refOf(a.GetOldObject())
	prev, err := record.Previous(a, workload.PushSecretCheckedAnnotation)
	if err != nil {
		return decision{}, err
	}
	switch {
	case now != ref(oldNS, oldName):
		return decision{record: now, checkNS: ns, checkName: name, mustBeAllowed: now != ""}, nil
	case now == "" || prev == now:
		return decision{record: prev}, nil
	case p.allowed(ctx, a, ns, name) == nil:
		return decision{record: now}, nil
	}
	return decision{record: prev}, nil
}

// allowed checks that the requester may get the Secret ns/name in the
// request's cluster, with its own identity.
func (p *Plugin) allowed(ctx context.Context, a admission.Attributes, ns, name string) error {
	who := ""
	if u := a.GetUserInfo(); u != nil {
		who = u.GetName()
	}
	if viewidentity.Continued(ctx) {
		return fmt.Errorf("spec.push cannot be set through a view (%q): kcp would use the Secret it names without knowing who asked", who)
	}
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster.IsWildcard() || p.authz == nil {
		return fmt.Errorf("cannot check who may read Secret %s/%s", ns, name)
	}
	d, _, err := p.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: a.GetUserInfo(), Verb: "get", APIVersion: "v1", Resource: "secrets", Namespace: ns, Name: name, ResourceRequest: true,
	})
	if err == nil && d == authorizer.DecisionAllow {
		return nil
	}
	return fmt.Errorf("%q may not name Secret %s/%s in spec.push: kcp runs the syncer with the kubeconfig of the Secret that spec.push names, "+
		"so whoever sets or changes spec.push needs the verb \"get\" on that Secret (granted by RBAC in workspace %s)", who, ns, name, cluster)
}

// Admit writes kcp's record of the checked Secret; a client's value is
// replaced.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != syncTargets {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return nil
	}
	d, err := p.decide(ctx, a)
	if err != nil {
		return err
	}
	record.Set(obj, workload.PushSecretCheckedAnnotation, d.record)
	return nil
}

// Validate checks, on the object as it will be stored, that the requester
// may read the Secret it names and that the record is kcp's.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != syncTargets {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return nil
	}
	d, err := p.decide(ctx, a)
	if err != nil {
		return err
	}
	if d.mustBeAllowed {
		if err := p.allowed(ctx, a, d.checkNS, d.checkName); err != nil {
			return admission.NewForbidden(a, err)
		}
	}
	if obj.GetAnnotations()[workload.PushSecretCheckedAnnotation] != d.record {
		return admission.NewForbidden(a, fmt.Errorf("the annotation %s is kcp's record of the Secret it checked for spec.push and cannot be set or changed", workload.PushSecretCheckedAnnotation))
	}
	return nil
}
