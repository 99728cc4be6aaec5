package e2e

import (
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestNotEnforcedWarns: admission policies and webhooks are stored
// but not enforced yet; whoever creates one is told so by kubectl instead of
// believing the workspace is protected.
func TestNotEnforcedWarns(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:team")
	// Quotas are enforced (TestResourceQuota): no warning.
	if out := s.Kubectl("root:team", "create", "quota", "q", "--hard=count/configmaps=3"); strings.Contains(out, "Warning") {
		t.Errorf("kubectl create quota warned:\n%s", out)
	}
	out, err := s.KubectlErr("root:team", `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: w}
webhooks: []
`, "apply", "-f", "-")
	if err != nil || !strings.Contains(out, "Warning: admission webhooks are stored but never called") {
		t.Errorf("kubectl apply of a webhook configuration: %v\n%s", err, out)
	}
	// Objects kcp does enforce carry no such warning.
	if out := s.Kubectl("root:team", "create", "configmap", "c"); strings.Contains(out, "Warning") {
		t.Errorf("kubectl create configmap warned:\n%s", out)
	}
}
