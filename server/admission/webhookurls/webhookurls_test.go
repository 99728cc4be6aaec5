package webhookurls

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"

	"github.com/kcpsql/kcp/server/outbound"
	"github.com/kcpsql/kcp/storage/logicalcluster"
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

// TestAPIServices: an aggregated API (an APIService served by a Service)
// is refused in a workspace, clearly; root's and local ones pass.
func TestAPIServices(t *testing.T) {
	p := newPlugin(t)
	for _, c := range []struct {
		cluster logicalcluster.Name
		service bool
		refused bool
	}{
		{"root:team-a", true, true},
		{"root:team-a", false, false},
		{logicalcluster.Root, true, false},
	} {
		svc := &apiregistration.APIService{Spec: apiregistration.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1"}}
		svc.Name = "v1beta1.metrics.k8s.io"
		if c.service {
			svc.Spec.Service = &apiregistration.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}
		}
		a := admission.NewAttributesRecord(svc, nil, schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"},
			"", svc.Name, schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}, "", admission.Create, nil, false, nil)
		err := p.(admission.ValidationInterface).Validate(logicalcluster.WithCluster(context.Background(), c.cluster), a, nil)
		if c.refused != (err != nil) || (err != nil && !strings.Contains(err.Error(), "aggregated APIs")) {
			t.Errorf("%s, service %v: %v, want refused=%v", c.cluster, c.service, err, c.refused)
		}
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

// placedNamespaces says which namespaces are placed; it dials nothing.
type placedNamespaces map[string]bool

func (p placedNamespaces) DialService(context.Context, logicalcluster.Name, string, string, int32) (net.Conn, error) {
	return nil, errors.New("not dialed in this test")
}

func (p placedNamespaces) ServicePlaced(_ context.Context, _ logicalcluster.Name, namespace string) (bool, error) {
	return p[namespace], nil
}

type warnings []string

func (w *warnings) AddWarning(_, text string) { *w = append(*w, text) }

// TestServiceReferenceWarnings: a webhook or conversion naming a Service
// is stored; with a warning only while the Service's namespace is placed
// nowhere.
func TestServiceReferenceWarnings(t *testing.T) {
	reg := admission.NewPlugins()
	Register(reg, &outbound.Policy{Services: placedNamespaces{"placed": true}})
	p, err := reg.InitPlugin(PluginName, nil, admission.PluginInitializers{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"placed", "nowhere"} {
		hooks := &admissionregistration.ValidatingWebhookConfiguration{Webhooks: []admissionregistration.ValidatingWebhook{
			{Name: "svc.example.com", ClientConfig: admissionregistration.WebhookClientConfig{Service: &admissionregistration.ServiceReference{Namespace: ns, Name: "hook"}}}}}
		crd := &apiextensions.CustomResourceDefinition{}
		crd.Name = "widgets.example.com"
		crd.Spec.Conversion = &apiextensions.CustomResourceConversion{Strategy: apiextensions.WebhookConverter,
			WebhookClientConfig: &apiextensions.WebhookClientConfig{Service: &apiextensions.ServiceReference{Namespace: ns, Name: "hook"}}}
		for _, a := range []admission.Attributes{
			admission.NewAttributesRecord(hooks, nil, schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
				"", "svc", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, "", admission.Create, nil, false, nil),
			admission.NewAttributesRecord(crd, nil, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
				"", crd.Name, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "", admission.Create, nil, false, nil),
		} {
			var w warnings
			ctx := warning.WithWarningRecorder(logicalcluster.WithCluster(context.Background(), "root:team-a"), &w)
			if err := p.(admission.ValidationInterface).Validate(ctx, a, nil); err != nil {
				t.Errorf("%s in %s: refused: %v", a.GetResource().Resource, ns, err)
			}
			switch {
			case ns == "placed" && len(w) > 0:
				t.Errorf("%s in a placed namespace: warned %v", a.GetResource().Resource, w)
			case ns == "nowhere" && (len(w) != 1 || !strings.Contains(w[0], "Service nowhere/hook") || !strings.Contains(w[0], "not placed on any SyncTarget")):
				t.Errorf("%s in a namespace placed nowhere: warnings %v", a.GetResource().Resource, w)
			}
		}
	}
}
