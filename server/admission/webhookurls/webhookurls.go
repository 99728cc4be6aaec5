// Package webhookurls is the admission plugin that refuses, when a CRD or
// an admission webhook configuration is written, webhook URLs the server
// would refuse to call anyway (outbound.Policy): URLs whose host is a
// refused IP address or the local host. The tenant learns at once, with
// the reason, instead of at the first call. Names that resolve to refused
// addresses are only caught when called.
//
// A webhook (admission or CRD conversion) with a service reference is
// called on the Service's pods on the physical clusters its namespace is
// placed on (server/servicedial). If that namespace is placed nowhere, the
// configuration is stored with a warning (charts install such
// configurations before the namespace is placed, next to the Deployment
// that serves them; refusing them would fail the whole install): until it
// is placed, calls fail with a clear error, so requests it matches are
// refused (failurePolicy Fail) or pass without it (Ignore).
//
// An APIService served by a Service (an aggregated API, like
// metrics-server's) is refused outside root: kcp's aggregator serves root
// only, so in a workspace such an APIService would be stored and never
// served.
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
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"

	"github.com/kcpsql/kcp/server/outbound"
	"github.com/kcpsql/kcp/storage/logicalcluster"
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
	crds               = apiextensionsv1.Resource("customresourcedefinitions")
	validatingWebhooks = admissionregistrationv1.Resource("validatingwebhookconfigurations")
	mutatingWebhooks   = admissionregistrationv1.Resource("mutatingwebhookconfigurations")
	apiServices        = apiregistration.Resource("apiservices")
)

// serviceWarning is the warning for a service reference whose Service kcp
// cannot call now ("" if it can): its namespace is placed on no SyncTarget
// (or does not exist). what names the webhook and says what fails.
func (p *plugin) serviceWarning(ctx context.Context, namespace, name, what string) string {
	cluster, ok := logicalcluster.From(ctx)
	if !ok || p.policy == nil || p.policy.Services == nil {
		return fmt.Sprintf("%s: it names Service %s/%s, and kcp calls no Service here; %s", what, namespace, name, failing)
	}
	placed, err := p.policy.Services.ServicePlaced(ctx, cluster, namespace)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: it names Service %s/%s (%v); kcp calls the Service's pods on the physical clusters namespace %s is placed on, and %s", what, namespace, name, err, namespace, failing)
	case !placed:
		return fmt.Sprintf("%s: it names Service %s/%s, but namespace %s of this workspace is not placed on any SyncTarget; kcp calls the Service's pods on the physical clusters the namespace is placed on, and until then %s", what, namespace, name, namespace, failing)
	}
	return ""
}

const failing = "its calls fail (requests it matches are refused if its failurePolicy is Fail, and go through if it is Ignore)"

func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	switch a.GetResource().GroupResource() {
	case crds:
		return p.validateCRD(ctx, a)
	case validatingWebhooks, mutatingWebhooks:
		return p.validateWebhooks(ctx, a)
	case apiServices:
		return validateAPIService(ctx, a)
	}
	return nil
}

// validateAPIService refuses an aggregated API in a workspace.
func validateAPIService(ctx context.Context, a admission.Attributes) error {
	svc, ok := a.GetObject().(*apiregistration.APIService)
	if !ok || svc.Spec.Service == nil {
		return nil
	}
	if cluster, ok := logicalcluster.From(ctx); !ok || cluster == logicalcluster.Root {
		return nil
	}
	path := field.NewPath("spec", "service")
	return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), field.ErrorList{field.Forbidden(path,
		fmt.Sprintf("kcp does not serve aggregated APIs in a workspace: an APIService served by a Service (here %s/%s) is served in root only, "+
			"by kcp's own aggregator; serve %s/%s with CustomResourceDefinitions instead", svc.Spec.Service.Namespace, svc.Spec.Service.Name, svc.Spec.Group, svc.Spec.Version))})
}

// validateWebhooks refuses webhook URLs the policy refuses and warns of
// service references.
func (p *plugin) validateWebhooks(ctx context.Context, a admission.Attributes) error {
	type target struct {
		name    string
		url     *string
		service *admissionregistration.ServiceReference
	}
	var targets []target
	// Admission sees the internal types of built-in resources.
	switch c := a.GetObject().(type) {
	case *admissionregistration.ValidatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			targets = append(targets, target{w.Name, w.ClientConfig.URL, w.ClientConfig.Service})
		}
	case *admissionregistration.MutatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			targets = append(targets, target{w.Name, w.ClientConfig.URL, w.ClientConfig.Service})
		}
	default:
		return nil
	}
	var errs field.ErrorList
	for i, t := range targets {
		path := field.NewPath("webhooks").Index(i).Child("clientConfig")
		if t.service != nil {
			if w := p.serviceWarning(ctx, t.service.Namespace, t.service.Name, fmt.Sprintf("webhook %q", t.name)); w != "" {
				warning.AddWarning(ctx, "", w)
			}
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
// served by a Service (Tekton's, cert-manager's CRDs) is called on the
// Service's pods; while its namespace is placed nowhere the CRD is stored
// with a warning, and objects read at another version than the stored one
// fail to convert.
func (p *plugin) validateCRD(ctx context.Context, a admission.Attributes) error {
	var url *string
	var service *[2]string
	switch crd := a.GetObject().(type) {
	case *apiextensions.CustomResourceDefinition:
		if c := crd.Spec.Conversion; c != nil && c.WebhookClientConfig != nil {
			url = c.WebhookClientConfig.URL
			if s := c.WebhookClientConfig.Service; s != nil {
				service = &[2]string{s.Namespace, s.Name}
			}
		}
	case *apiextensionsv1.CustomResourceDefinition:
		if c := crd.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil {
			url = c.Webhook.ClientConfig.URL
			if s := c.Webhook.ClientConfig.Service; s != nil {
				service = &[2]string{s.Namespace, s.Name}
			}
		}
	default:
		return nil
	}
	path := field.NewPath("spec", "conversion", "webhook", "clientConfig")
	var errs field.ErrorList
	if service != nil {
		if w := p.serviceWarning(ctx, service[0], service[1], fmt.Sprintf("%s (the conversion webhook of %s)", path.Child("service"), a.GetName())); w != "" {
			warning.AddWarning(ctx, "", w)
		}
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
