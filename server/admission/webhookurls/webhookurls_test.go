package webhookurls

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"github.com/kcpsql/kcp/server/outbound"
)

func TestValidate(t *testing.T) {
	reg := admission.NewPlugins()
	Register(reg, &outbound.Policy{})
	p, err := reg.InitPlugin(PluginName, nil, admission.PluginInitializers{})
	if err != nil {
		t.Fatal(err)
	}
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
