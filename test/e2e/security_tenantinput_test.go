package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// paramPolicy is a ValidatingAdmissionPolicy whose parameters are a
// ConfigMap (paramKind) chosen by its binding (paramRef): configmaps of
// the workspace may have at most params.data.max keys. Before the fix,
// storing it made the server panic in the background and exit, and
// again at every start.
const paramPolicy = `apiVersion: v1
kind: ConfigMap
metadata: {name: limits, namespace: default}
data: {max: "2"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: max-keys}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.data) || size(object.data) <= int(params.data.max)"
    messageExpression: "'at most ' + params.data.max + ' keys in a configmap here'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: max-keys}
spec:
  policyName: max-keys
  validationActions: [Deny]
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {team: checked}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: missing-kind}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: example.com/v1, kind: NoSuchKind}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]}
  validations:
  - expression: "true"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: missing-kind}
spec:
  policyName: missing-kind
  validationActions: [Deny]
  paramRef: {name: whatever, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {team: checked}
---
apiVersion: v1
kind: Namespace
metadata: {name: checked, labels: {team: checked}}
`

// TestTenantInputCannotCrashTheServer is issue 49's first row: a
// workspace admin stores what upstream's machinery handles badly, and the
// server must go on serving every workspace, also after a restart, with
// the tenant's policy doing what it says.
func TestTenantInputCannotCrashTheServer(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:evil", "root:bystander")
	applyYAML(t, s, "root:evil", paramPolicy)

	enforced := func(when string) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, "the policy with parameters denies "+when, func() (bool, string) {
			out, err := s.KubectlErr("root:evil", "", "-n", "checked", "create", "configmap", "three-"+framework.RandomSuffix(), "--from-literal=a=1", "--from-literal=b=2", "--from-literal=c=3")
			return err != nil && strings.Contains(out, "at most 2 keys in a configmap here"), out
		})
		if out, err := s.KubectlErr("root:evil", "", "-n", "checked", "create", "configmap", "two-"+framework.RandomSuffix(), "--from-literal=a=1", "--from-literal=b=2"); err != nil {
			t.Fatalf("a configmap within the parameter's limit %s: %v\n%s", when, err, out)
		}
		// A policy whose parameter kind does not exist fails closed for
		// what it matches (failurePolicy Fail), as upstream, and only there
		// (once the plugin has compiled it: policies are compiled apart).
		framework.Eventually(t, 30*time.Second, "a secret under a policy with a missing paramKind refused "+when, func() (bool, string) {
			out, err := s.KubectlErr("root:evil", "", "-n", "checked", "create", "secret", "generic", "s-"+framework.RandomSuffix(), "--from-literal=a=1")
			return err != nil && strings.Contains(out, "paramKind"), out
		})
		// Other workspaces and the server are untouched.
		s.Kubectl("root:bystander", "create", "configmap", "ok-"+framework.RandomSuffix(), "--from-literal=a=1", "--from-literal=b=2", "--from-literal=c=3")
		s.Kubectl("root:bystander", "create", "secret", "generic", "ok-"+framework.RandomSuffix(), "--from-literal=a=1")
		if code, body := framework.Do(t, framework.UserClient(t, s, "admin", "system:masters"), "GET", s.URL()+"/readyz", ""); code != 200 {
			t.Fatalf("readyz %s: %d %s", when, code, body)
		}
	}
	enforced("while the server runs")
	// The policy is stored: the next start reads it before any request.
	s.Stop()
	s.Start()
	enforced("after a restart")
	if strings.Contains(s.LogTail(4000), "panic") {
		t.Errorf("the server log mentions a panic:\n%s", s.LogTail(200))
	}
}
