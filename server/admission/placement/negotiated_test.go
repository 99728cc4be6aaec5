package placement

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/kubernetes/pkg/apis/apps"
	api "k8s.io/kubernetes/pkg/apis/core"

	negotiatedapis "github.com/kcpsql/kcp/server/negotiated"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestCheckNegotiated: a Deployment that sets a field the negotiated
// schema lacks is refused, naming the field; one that does not, and one
// in a cluster placed nowhere, pass.
func TestCheckNegotiated(t *testing.T) {
	obj := func(props map[string]apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
		return &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}
	}
	str, integer := apiextensionsv1.JSONSchemaProps{Type: "string"}, apiextensionsv1.JSONSchemaProps{Type: "integer"}
	container := obj(map[string]apiextensionsv1.JSONSchemaProps{"name": str, "image": str})
	lcd := obj(map[string]apiextensionsv1.JSONSchemaProps{
		"apiVersion": str, "kind": str, "metadata": {Type: "object"},
		"spec": *obj(map[string]apiextensionsv1.JSONSchemaProps{
			"replicas": integer,
			"template": *obj(map[string]apiextensionsv1.JSONSchemaProps{
				"spec": *obj(map[string]apiextensionsv1.JSONSchemaProps{"containers": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: container}}}),
			}),
		}),
	})
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	SetBuiltInSchemas(func(cluster logicalcluster.Name, got schema.GroupResource) []negotiatedapis.LocationSchema {
		if cluster != "root:placed" || got != gr {
			return nil
		}
		return []negotiatedapis.LocationSchema{{Location: "root:compute", Version: "v1", Schema: lcd}}
	})
	defer builtInSchemas.Store(nil)
	attrs := func(cluster logicalcluster.Name, d *apps.Deployment) admission.Attributes {
		return admission.NewAttributesRecord(d, nil, apps.Kind("Deployment").WithVersion("v1"), "default", d.Name, gr.WithVersion("v1"), "", admission.Create, &metav1.CreateOptions{}, false, nil)
	}
	replicas := int32(2)
	plain := &apps.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: apps.DeploymentSpec{Replicas: replicas,
		Template: api.PodTemplateSpec{Spec: api.PodSpec{Containers: []api.Container{{Name: "web", Image: "nginx"}}}}}}
	if err := checkNegotiated("root:placed", gr, attrs("root:placed", plain)); err != nil {
		t.Errorf("a Deployment within the negotiated schema: %v", err)
	}
	slow := plain.DeepCopy()
	slow.Spec.MinReadySeconds = 5
	slow.Spec.Template.Spec.Containers[0].WorkingDir = "/srv"
	err := checkNegotiated("root:placed", gr, attrs("root:placed", slow))
	if err == nil || !strings.Contains(err.Error(), "spec.minReadySeconds") || !strings.Contains(err.Error(), "spec.template.spec.containers[0].workingDir") ||
		!strings.Contains(err.Error(), "root:compute") {
		t.Errorf("fields the negotiated schema lacks: %v", err)
	}
	if err := checkNegotiated("root:elsewhere", gr, attrs("root:elsewhere", slow)); err != nil {
		t.Errorf("a cluster placed nowhere: %v", err)
	}
}
