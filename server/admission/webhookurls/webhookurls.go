// Package webhookurls is the admission plugin that refuses, when a CRD or
// an admission webhook configuration is written, webhook targets the server
// would refuse to call anyway (outbound.Policy): URLs whose host is a refused
// IP address or the local host, and a CRD's conversion service reference.
// The tenant learns at once, with the reason, instead of at the first call.
// Names that resolve to refused addresses are only caught when called.
//
// An admission webhook with a service reference is stored with a warning
// (charts install such configurations next to the Deployment that serves
// them; refusing them would fail the whole install): its calls fail with a
// clear error, so requests it matches are refused (failurePolicy Fail) or
// pass without it (Ignore).
package webhookurls

import (
	"context"
	"fmt"
	"io"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"

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

var (
	crds                  = apiextensionsv1.Resource("customresourcedefinitions")
	validatingWebhooks    = admissionregistrationv1.Resource("validatingwebhookconfigurations")
	mutatingWebhooks      = admissionregistrationv1.Resource("mutatingwebhookconfigurations")
	serviceReferenceWarns = "kcp does not call webhooks served by a Service yet (the Service's pods run on physical clusters, which kcp reaches only through their syncer): calls of this webhook fail (requests it matches are refused if its failurePolicy is Fail, and go through if it is Ignore); give it a url"
)

func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	switch a.GetResource().GroupResource() {
	case crds:
		return p.validateCRD(ctx, a)
	case validatingWebhooks, mutatingWebhooks:
		return p.validateWebhooks(ctx, a)
	}
	return nil
}

// validateWebhooks refuses webhook URLs the policy refuses and warns of
// service references.
func (p *plugin) validateWebhooks(ctx context.Context, a admission.Attributes) error {
	type target struct {
		name    string
		url     *string
		service bool
	}
	var targets []target
	// Admission sees the internal types of built-in resources.
	switch c := a.GetObject().(type) {
	case *admissionregistration.ValidatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			targets = append(targets, target{w.Name, w.ClientConfig.URL, w.ClientConfig.Service != nil})
		}
	case *admissionregistration.MutatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			targets = append(targets, target{w.Name, w.ClientConfig.URL, w.ClientConfig.Service != nil})
		}
	default:
		return nil
	}
	var errs field.ErrorList
	for i, t := range targets {
		path := field.NewPath("webhooks").Index(i).Child("clientConfig")
		if t.service {
			warning.AddWarning(ctx, "", fmt.Sprintf("webhook %q has a service reference: %s", t.name, serviceReferenceWarns))
		}
		if t.url != nil {
			if err := p.policy.CheckURL(*t.url); err != nil {
				errs = append(errs, field.Forbidden(path.Child("url"), err.Error()))
			}
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
	}
	return nil
}

// validateCRD checks a CRD's conversion webhook URL. A conversion webhook
// served by a Service (Tekton's, cert-manager's CRDs) is accepted with a
// warning: its objects are served at the storage version, and a request
// at another version fails with the webhook's error, until kcp can call a
// Service's pods on a physical cluster.
func (p *plugin) validateCRD(ctx context.Context, a admission.Attributes) error {
	var url *string
	var service bool
	var storage string
	switch crd := a.GetObject().(type) {
	case *apiextensions.CustomResourceDefinition:
		if c := crd.Spec.Conversion; c != nil && c.WebhookClientConfig != nil {
			url, service = c.WebhookClientConfig.URL, c.WebhookClientConfig.Service != nil
		}
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				storage = v.Name
			}
		}
	case *apiextensionsv1.CustomResourceDefinition:
		if c := crd.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil {
			url, service = c.Webhook.ClientConfig.URL, c.Webhook.ClientConfig.Service != nil
		}
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				storage = v.Name
			}
		}
	default:
		return nil
	}
	path := field.NewPath("spec", "conversion", "webhook", "clientConfig")
	var errs field.ErrorList
	if service {
		warning.AddWarning(ctx, "", fmt.Sprintf("%s: kcp does not call conversion webhooks served by a Service yet (the Service's pods run on physical clusters, which kcp reaches only through their syncer); "+
			"%s is served at its storage version %s, and a request at another version fails until the webhook is given a url", path.Child("service"), a.GetName(), storage))
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
