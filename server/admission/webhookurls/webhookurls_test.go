package webhookurls

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"

	"github.com/kcpsql/kcp/server/outbound"
)

func TestValidate(t *testing.T) {
	p := newPlugin(t)
	for url, want := range map[string]string{
		"https://127.0.0.1:8443/convert":  "127.0.0.0/8",
		"https://[::1]/convert":           "::1/128",
		"https://localhost/convert":       "own host",
		"https://169.254.169.254/":        "169.254.0.0/16",
		"https://webhook.example.com/x":   "",
		"https://203.0.113.7:443/convert": "",
		"https://10.1.2.3/convert":        "--webhook-allowed-networks",
	} {
		crd := &apiextensions.CustomResourceDefinition{}
		crd.Name = "widgets.example.com"
		crd.Spec.Conversion = &apiextensions.CustomResourceConversion{Strategy: apiextensions.WebhookConverter,
			WebhookClientConfig: &apiextensions.WebhookClientConfig{URL: &url}}
		a := admission.NewAttributesRecord(crd, nil, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
			"", crd.Name, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "", admission.Create, nil, false, nil)
		err := p.(admission.ValidationInterface).Validate(context.Background(), a, nil)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %v", url, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want an error containing %q", url, err, want)
		}
	}
}

func TestValidateAdmissionWebhooks(t *testing.T) {
	p := newPlugin(t)
	for url, want := range map[string]string{
		"https://127.0.0.1:8443/validate": "127.0.0.0/8",
		"https://169.254.169.254/":        "169.254.0.0/16",
		"https://webhook.example.com/x":   "",
	} {
		for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
			var obj runtime.Object
			if kind == "ValidatingWebhookConfiguration" {
				obj = &admissionregistration.ValidatingWebhookConfiguration{Webhooks: []admissionregistration.ValidatingWebhook{
					{Name: "ok.example.com", ClientConfig: admissionregistration.WebhookClientConfig{URL: ptr("https://webhook.example.com/ok")}},
					{Name: "w.example.com", ClientConfig: admissionregistration.WebhookClientConfig{URL: &url}}}}
			} else {
				obj = &admissionregistration.MutatingWebhookConfiguration{Webhooks: []admissionregistration.MutatingWebhook{
					{Name: "w.example.com", ClientConfig: admissionregistration.WebhookClientConfig{URL: &url}}}}
			}
			resource := strings.ToLower(kind) + "s"
			a := admission.NewAttributesRecord(obj, nil, schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind},
				"", "w", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: resource}, "", admission.Create, nil, false, nil)
			err := p.(admission.ValidationInterface).Validate(context.Background(), a, nil)
			switch {
			case want == "" && err != nil:
				t.Errorf("%s %s refused: %v", kind, url, err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("%s %s: got %v, want an error containing %q", kind, url, err, want)
			}
		}
	}
	// A service reference is stored (with a warning): charts create them.
	svc := &admissionregistration.ValidatingWebhookConfiguration{Webhooks: []admissionregistration.ValidatingWebhook{
		{Name: "svc.example.com", ClientConfig: admissionregistration.WebhookClientConfig{Service: &admissionregistration.ServiceReference{Namespace: "ns", Name: "svc"}}}}}
	a := admission.NewAttributesRecord(svc, nil, schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
		"", "svc", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, "", admission.Create, nil, false, nil)
	if err := p.(admission.ValidationInterface).Validate(context.Background(), a, nil); err != nil {
		t.Errorf("service reference refused: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// newPlugin returns the plugin with the default outbound policy.
func newPlugin(t *testing.T) admission.Interface {
	t.Helper()
	reg := admission.NewPlugins()
	Register(reg, &outbound.Policy{})
	p, err := reg.InitPlugin(PluginName, nil, admission.PluginInitializers{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
