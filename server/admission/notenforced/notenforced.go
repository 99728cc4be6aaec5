// Package notenforced warns whoever writes an object that kcp serves but
// does not act on yet: admission policies and their
// bindings, and admission webhook configurations are stored in every
// logical cluster (so manifests and conformance tests that create them
// work), but upstream's enforcing plugins are cluster-unaware and are off.
// Until they are made cluster-aware, every create and update of such an
// object answers with a warning (kubectl prints it) rather than letting a
// team believe it is protected.
package notenforced

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/NotEnforcedWarning"

// notEnforced maps each resource kcp stores but does not enforce to what a
// user would otherwise expect from it.
var notEnforced = map[schema.GroupResource]string{
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}:       "ValidatingAdmissionPolicies are stored but not applied to requests in kcp yet",
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}: "ValidatingAdmissionPolicyBindings are stored but not applied to requests in kcp yet",
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}:         "MutatingAdmissionPolicies are stored but not applied to requests in kcp yet",
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicybindings"}:   "MutatingAdmissionPolicyBindings are stored but not applied to requests in kcp yet",
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}:   "admission webhooks are stored but never called in kcp yet",
	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}:     "admission webhooks are stored but never called in kcp yet",
}

type plugin struct{ *admission.Handler }

// Register adds the plugin to a plugin registry.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return plugin{admission.NewHandler(admission.Create, admission.Update)}, nil
	})
}

var _ admission.ValidationInterface = plugin{}

func (plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	if what, ok := notEnforced[a.GetResource().GroupResource()]; ok {
		warning.AddWarning(ctx, "", fmt.Sprintf("%s: %s %q has no effect (docs/tenancy.md)", what, a.GetKind().Kind, a.GetName()))
	}
	return nil
}
