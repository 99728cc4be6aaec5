package workloadapis

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRefusedTable(t *testing.T) {
	for kind, want := range map[string]string{"Endpoints": "endpoints", "NetworkPolicy": "networkpolicies", "StatefulSet": "statefulsets",
		"HorizontalPodAutoscaler": "horizontalpodautoscalers", "PodDisruptionBudget": "poddisruptionbudgets", "Ingress": "ingresses"} {
		if got := resourceOf(kind); got != want {
			t.Errorf("resourceOf(%s) = %s, want %s", kind, got, want)
		}
	}
	// Every kind of the table is in the scheme, with its list.
	for _, gvk := range builtIn {
		if _, err := newRefused(gvk, resourceOf(gvk.Kind)); err != nil {
			t.Error(err)
		}
	}
	msg := RefusedMessage(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, "statefulsets")
	for _, want := range []string{"StatefulSet (apps/v1, statefulsets.apps)", "deployments.apps", "Placement", "--resources", "docs/multicluster.md"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
}
