// Package webhookurls is the admission plugin that refuses, when a CRD is
// written, conversion webhook targets the server would refuse to call
// anyway (outbound.Policy): service references and URLs whose host is a
// refused IP address or the local host. The tenant learns at once, with the
// reason, instead of at the first conversion. Names that resolve to refused
// addresses are only caught when called.
package webhookurls

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"github.com/kcpsql/kcp/server/outbound"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/WebhookURLs"

// Register adds the plugin, deciding by policy, to a plugin registry.
func Register(plugins *admission.Plugins, policy *outbound.Policy) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), policy: policy}, nil
	})
}

type plugin struct {
	*admission.Handler
	policy *outbound.Policy
}

var _ admission.ValidationInterface = &plugin{}

var crds = apiextensionsv1.Resource("customresourcedefinitions")

func (p *plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != crds || a.GetSubresource() != "" {
		return nil
	}
	var url *string
	var service bool
	switch crd := a.GetObject().(type) {
	case *apiextensions.CustomResourceDefinition:
		if c := crd.Spec.Conversion; c != nil && c.WebhookClientConfig != nil {
			url, service = c.WebhookClientConfig.URL, c.WebhookClientConfig.Service != nil
		}
	case *apiextensionsv1.CustomResourceDefinition:
		if c := crd.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil {
			url, service = c.Webhook.ClientConfig.URL, c.Webhook.ClientConfig.Service != nil
		}
	default:
		return nil
	}
	path := field.NewPath("spec", "conversion", "webhook", "clientConfig")
	var errs field.ErrorList
	if service {
		errs = append(errs, field.Forbidden(path.Child("service"), "logical clusters have no Services for kcp to call; give the webhook a url"))
	}
	if url != nil {
		if err := p.policy.CheckURL(*url); err != nil {
			errs = append(errs, field.Forbidden(path.Child("url"), err.Error()))
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
	}
	return nil
}

// String names the plugin in messages.
func (p *plugin) String() string { return fmt.Sprintf("admission plugin %s", PluginName) }
