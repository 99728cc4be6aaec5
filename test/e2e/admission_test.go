package e2e

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

const forbiddenKeyPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-forbidden-key}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.data) || !('forbidden' in object.data)"
    message: configmaps in this workspace may not have a key named forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-forbidden-key}
spec:
  policyName: no-forbidden-key
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {env: prod}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: stamp}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"stamped-by": "policy-a"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: stamp}
spec:
  policyName: stamp
`

// gizmos is a CRD whose spec.size has the given type: a policy comparing
// it with a string type-checks in one workspace and not in the other.
func gizmos(sizeType string) string {
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: ` + sizeType + `}}}
`
}

const gizmoSizePolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: gizmo-size}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [gizmos]}
  validations:
  - expression: 'object.spec.size == "big"'
`

// TestAdmissionPolicies is issue 17's ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy per logical cluster: A's policies (with a
// namespace selector, so A's namespaces are the ones selected) deny and
// mutate A's requests; B, with the same namespaces, labels and names, is
// touched by none of them; type checking reads each workspace's own CRD
// schema; deleting A's binding lifts its denial.
func TestAdmissionPolicies(t *testing.T) {
	s := framework.StartServer(t, "")
	const a, b = "root:policy-a", "root:policy-b"
	s.CreateWorkspaces(a, b)
	for _, ws := range []string{a, b} {
		s.Kubectl(ws, "create", "namespace", "team")
		s.Kubectl(ws, "label", "namespace", "team", "env=prod")
		s.Kubectl(ws, "create", "namespace", "dev")
	}
	ctx := context.Background()
	if out, err := s.KubectlErr(a, forbiddenKeyPolicy, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(s.Kubectl(a, "get", "validatingadmissionpolicies"), "Warning") {
		t.Error("kubectl warns about enforced policies")
	}
	cm := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
	}
	bad := map[string]string{"forbidden": "x"}
	framework.Eventually(t, 30*time.Second, "A's policy denies in A", func() (bool, string) {
		_, err := s.Client(a).CoreV1().ConfigMaps("team").Create(ctx, cm("probe", bad), metav1.CreateOptions{})
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "may not have a key named forbidden"), fmt.Sprint(err)
	})
	// The same request in A's unselected namespace, and in B's selected one.
	if _, err := s.Client(a).CoreV1().ConfigMaps("dev").Create(ctx, cm("probe", bad), metav1.CreateOptions{}); err != nil {
		t.Errorf("A's policy applied outside its namespace selector: %v", err)
	}
	created, err := s.Client(b).CoreV1().ConfigMaps("team").Create(ctx, cm("probe", bad), metav1.CreateOptions{})
	if err != nil {
		t.Errorf("A's policy applied in B: %v", err)
	} else if created.Labels["stamped-by"] != "" {
		t.Errorf("A's mutating policy mutated B's configmap: %v", created.Labels)
	}
	// A's mutating policy stamps A's configmaps.
	framework.Eventually(t, 30*time.Second, "A's mutating policy stamps in A", func() (bool, string) {
		s.Client(a).CoreV1().ConfigMaps("dev").Delete(ctx, "stamped", metav1.DeleteOptions{})
		c, err := s.Client(a).CoreV1().ConfigMaps("dev").Create(ctx, cm("stamped", nil), metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return c.Labels["stamped-by"] == "policy-a", fmt.Sprint(c.Labels)
	})
	// The same policies in B (kubectl apply of the same file) then apply in B too.
	if out, err := s.KubectlErr(b, forbiddenKeyPolicy, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "B's own policy denies in B", func() (bool, string) {
		_, err := s.Client(b).CoreV1().ConfigMaps("team").Create(ctx, cm("probe2", bad), metav1.CreateOptions{})
		return apierrors.IsInvalid(err), fmt.Sprint(err)
	})
	// Deleting A's binding lifts the denial in A, not in B.
	s.Kubectl(a, "delete", "validatingadmissionpolicybinding", "no-forbidden-key")
	framework.Eventually(t, 30*time.Second, "A's denial lifted", func() (bool, string) {
		_, err := s.Client(a).CoreV1().ConfigMaps("team").Create(ctx, cm("after", bad), metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if _, err := s.Client(b).CoreV1().ConfigMaps("team").Create(ctx, cm("after", bad), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("deleting A's binding lifted B's policy: %v", err)
	}

	// Type checking: the same policy over a CRD whose spec.size is an
	// integer in A and a string in B warns in A only.
	s.KubectlErr(a, gizmos("integer"), "apply", "-f", "-")
	s.KubectlErr(b, gizmos("string"), "apply", "-f", "-")
	s.WaitEstablished(a, "crd/gizmos.example.com")
	s.WaitEstablished(b, "crd/gizmos.example.com")
	for _, ws := range []string{a, b} {
		if out, err := s.KubectlErr(ws, gizmoSizePolicy, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	status := func(ws string) string {
		return s.Kubectl(ws, "get", "validatingadmissionpolicy", "gizmo-size", "-o", `jsonpath={.status.observedGeneration} {.status.typeChecking.expressionWarnings[*].warning}`)
	}
	framework.Eventually(t, 60*time.Second, "A's policy type-checked against A's gizmos", func() (bool, string) {
		st := status(a)
		return strings.HasPrefix(st, "1 ") && strings.Contains(st, "no matching overload"), st
	})
	framework.Eventually(t, 60*time.Second, "B's policy type-checked against B's gizmos", func() (bool, string) {
		st := status(b)
		return st == "1 ", st
	})
}

// admissionWebhook is an https admission webhook on 127.0.0.1 that records
// the names it was asked about and whether callers sent credentials.
// /validate refuses objects labelled deny=true, /mutate annotates, /slow
// answers after 3 s.
type admissionWebhook struct {
	srv         *httptest.Server
	mu          sync.Mutex
	seen        []string
	credentials int
}

func newAdmissionWebhook(t *testing.T) *admissionWebhook {
	w := &admissionWebhook{}
	w.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, fmt.Sprint(err), http.StatusBadRequest)
			return
		}
		var obj metav1.PartialObjectMetadata
		json.Unmarshal(review.Request.Object.Raw, &obj)
		w.mu.Lock()
		w.seen = append(w.seen, r.URL.Path+" "+review.Request.Name)
		if r.Header.Get("Authorization") != "" || (r.TLS != nil && len(r.TLS.PeerCertificates) > 0) {
			w.credentials++
		}
		w.mu.Unlock()
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		switch r.URL.Path {
		case "/validate":
			if obj.Labels["deny"] == "true" {
				resp.Allowed = false
				resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "denied by the test webhook"}
			}
		case "/mutate":
			pt := admissionv1.PatchTypeJSONPatch
			resp.PatchType = &pt
			resp.Patch = []byte(`[{"op":"add","path":"/metadata/annotations","value":{"webhook.example.com/mutated":"true"}}]`)
		case "/slow":
			time.Sleep(3 * time.Second)
		}
		review.Response = resp
		review.Request = nil
		json.NewEncoder(rw).Encode(review)
	}))
	w.srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	w.srv.StartTLS()
	t.Cleanup(w.srv.Close)
	return w
}

func (w *admissionWebhook) clientConfig(path string) string {
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.srv.Certificate().Raw}))
	return `{url: "` + w.srv.URL + path + `", caBundle: "` + ca + `"}`
}

func (w *admissionWebhook) calls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// webhookConfig is a webhook configuration of kind with one webhook on
// configmaps (CREATE) with the given client config, failure policy,
// timeout and object selector.
func webhookConfig(kind, name, clientConfig, failurePolicy string, timeout int, selector string) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: %s
metadata: {name: %s}
webhooks:
- name: %s.example.com
  clientConfig: %s
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  failurePolicy: %s
  timeoutSeconds: %d
  objectSelector: {matchLabels: {%s}}
  sideEffects: None
  admissionReviewVersions: [v1]
`, kind, name, name, clientConfig, failurePolicy, timeout, selector)
}

// TestAdmissionWebhooks is issue 17's admission webhooks per logical
// cluster: a webhook server on 127.0.0.1 (allowed by the operator's flag)
// configured in A is called for A's requests only, denies and mutates
// them, never receives the server's credentials; failurePolicy Fail and
// Ignore and timeoutSeconds behave as upstream; a service reference to a
// namespace placed on no physical cluster is stored with a warning and its
// calls fail with a clear error (webhooks served by pods:
// test/e2e/multicluster/webhooks_test.go); URLs in
// refused networks are refused when the configuration is written.
func TestAdmissionWebhooks(t *testing.T) {
	hook := newAdmissionWebhook(t)
	s := framework.StartServer(t, "", "--webhook-allowed-networks=127.0.0.1/32")
	const a, b = "root:hooks-a", "root:hooks-b"
	s.CreateWorkspaces(a, b)
	ctx := context.Background()
	apply := func(ws, yaml string) string {
		t.Helper()
		out, err := s.KubectlErr(ws, yaml, "apply", "-f", "-")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	apply(a, webhookConfig("ValidatingWebhookConfiguration", "deny", hook.clientConfig("/validate"), "Fail", 10, "hook: enabled"))
	apply(a, webhookConfig("MutatingWebhookConfiguration", "mutate", hook.clientConfig("/mutate"), "Fail", 10, "hook: enabled"))
	cm := func(name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	on := map[string]string{"hook": "enabled"}
	framework.Eventually(t, 30*time.Second, "A's webhooks called for A", func() (bool, string) {
		s.Client(a).CoreV1().ConfigMaps("default").Delete(ctx, "a-ok", metav1.DeleteOptions{})
		c, err := s.Client(a).CoreV1().ConfigMaps("default").Create(ctx, cm("a-ok", on), metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return c.Annotations["webhook.example.com/mutated"] == "true", fmt.Sprint(c.Annotations)
	})
	_, err := s.Client(a).CoreV1().ConfigMaps("default").Create(ctx, cm("a-denied", map[string]string{"hook": "enabled", "deny": "true"}), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "denied by the test webhook") {
		t.Errorf("A's validating webhook did not deny: %v", err)
	}
	// B: the same labels, not a single call.
	c, err := s.Client(b).CoreV1().ConfigMaps("default").Create(ctx, cm("b-denied", map[string]string{"hook": "enabled", "deny": "true"}), metav1.CreateOptions{})
	if err != nil {
		t.Errorf("A's webhook applied in B: %v", err)
	} else if c.Annotations["webhook.example.com/mutated"] != "" {
		t.Errorf("A's mutating webhook mutated B's object: %v", c.Annotations)
	}

	// Timeouts: a webhook answering after 3 s with timeoutSeconds 1.
	apply(a, webhookConfig("ValidatingWebhookConfiguration", "slow-ignore", hook.clientConfig("/slow"), "Ignore", 1, "slow: ignore"))
	apply(a, webhookConfig("ValidatingWebhookConfiguration", "slow-fail", hook.clientConfig("/slow"), "Fail", 1, "slow: fail"))
	framework.Eventually(t, 30*time.Second, "a timed-out webhook with failurePolicy Fail refuses", func() (bool, string) {
		_, err := s.Client(a).CoreV1().ConfigMaps("default").Create(ctx, cm("a-slow-fail", map[string]string{"slow": "fail"}), metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "slow-fail.example.com") && strings.Contains(err.Error(), "deadline"), fmt.Sprint(err)
	})
	start := time.Now()
	if _, err := s.Client(a).CoreV1().ConfigMaps("default").Create(ctx, cm("a-slow-ignore", map[string]string{"slow": "ignore"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("a timed-out webhook with failurePolicy Ignore refused: %v", err)
	}
	t.Logf("create through a timed-out Ignore webhook took %v", time.Since(start).Round(time.Millisecond))
	if _, err := s.Client(b).CoreV1().ConfigMaps("default").Create(ctx, cm("b-slow", map[string]string{"slow": "fail"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("A's slow webhook reached B: %v", err)
	}

	// A service reference, its namespace placed nowhere: stored with a
	// warning, its calls fail clearly.
	out := apply(a, webhookConfig("ValidatingWebhookConfiguration", "svc", `{service: {namespace: default, name: hook, port: 443}}`, "Fail", 5, "svc: ref"))
	if !strings.Contains(out, "not placed on any SyncTarget") {
		t.Errorf("no warning for a service reference:\n%s", out)
	}
	framework.Eventually(t, 30*time.Second, "a service-referencing webhook's call fails clearly", func() (bool, string) {
		_, err := s.Client(a).CoreV1().ConfigMaps("default").Create(ctx, cm("a-svc", map[string]string{"svc": "ref"}), metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "Service default/hook") && strings.Contains(err.Error(), "not placed on any SyncTarget"), fmt.Sprint(err)
	})

	// Refused networks, whatever the flag allows besides.
	for _, url := range []string{"https://10.1.2.3/validate", "https://169.254.169.254/latest", "https://127.0.0.2:443/x", "https://[::1]/x"} {
		out, err := s.KubectlErr(a, webhookConfig("ValidatingWebhookConfiguration", "refused", `{url: "`+url+`"}`, "Fail", 5, "x: z"), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, "--webhook-allowed-networks") {
			t.Errorf("webhook URL %s: want a refusal naming --webhook-allowed-networks, got %v\n%s", url, err, out)
		}
	}
	if out, _ := s.KubectlErr(a, "", "get", "validatingwebhookconfiguration", "refused"); !strings.Contains(out, "NotFound") {
		t.Errorf("a refused configuration was stored: %s", out)
	}

	for _, call := range hook.calls() {
		if strings.Contains(call, " b-") {
			t.Errorf("the webhook was called for B's object: %s", call)
		}
	}
	hook.mu.Lock()
	if hook.credentials > 0 {
		t.Errorf("%d webhook calls carried credentials", hook.credentials)
	}
	hook.mu.Unlock()
}

// TestAdmissionWebhookSSRF: with the default flags a tenant's admin cannot
// aim an admission webhook at the server's own host or networks, neither by
// address (refused when written) nor by a name that resolves there
// (refused when dialed); the target is never reached.
func TestAdmissionWebhookSSRF(t *testing.T) {
	target := newWebhookTarget(t, "127.0.0.1:0")
	s := framework.StartServer(t, "")
	tenant := tenantAdmin(t, s, "ssrf-hooks", "ssrf-tenant")
	base := s.URL() + "/clusters/root:ssrf-hooks"
	config := func(name, host string) string {
		url := "https://" + net.JoinHostPort(host, target.port()) + "/leak"
		return `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"` + name + `"},
"webhooks":[{"name":"leak.example.com","clientConfig":{"url":"` + url + `","caBundle":"` + target.caBundle() + `"},
"rules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}],
"failurePolicy":"Fail","sideEffects":"None","admissionReviewVersions":["v1"]}]}`
	}
	for i, host := range []string{"127.0.0.1", "::1", "0.0.0.0", "localhost"} {
		code, body := framework.Do(t, tenant, "POST", base+"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", config(fmt.Sprintf("leak%d", i), host))
		if code != http.StatusUnprocessableEntity || !strings.Contains(body, "clientConfig.url") {
			t.Errorf("webhook at %s: %d, want 422 naming the url: %s", host, code, body)
		}
	}
	// A name that resolves to the server's own host passes admission; the
	// dialer refuses the address it resolves to, and the request the
	// webhook matches fails (failurePolicy Fail) naming the flag.
	if host, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(host); err == nil && len(ips) > 0 && (ips[0].IsLoopback() || ips[0].IsPrivate()) {
			code, body := framework.Do(t, tenant, "POST", base+"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", config("byname", host))
			if code != http.StatusCreated {
				t.Fatalf("webhook by host name: %d %s", code, body)
			}
			framework.Eventually(t, 30*time.Second, "the call through the host name refused", func() (bool, string) {
				code, body := framework.Do(t, tenant, "POST", base+"/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"probe"}}`)
				return code >= 400 && strings.Contains(body, "--webhook-allowed-networks"), fmt.Sprintf("%d %s", code, body)
			})
		} else {
			t.Logf("host name %s does not resolve to a loopback or private address; row skipped", host)
		}
	}
	if n := target.conns.Load(); n != 0 {
		t.Errorf("the internal target was reached %d times", n)
	}
}
