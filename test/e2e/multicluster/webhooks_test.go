package multicluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestWebhooksServedByPods is issue 53's item 2: an application installs
// webhook configurations (validating, mutating) and a CRD with a
// conversion webhook whose clientConfig.service names its own Service,
// whose pod runs on a physical cluster; kcp calls them through the
// syncer's tunnel (pull) or its own connection to the cluster (push).
//
// KWOK pods run no containers, so the test plays the pod: a real HTTPS
// webhook server in the test process listens on this machine's
// non-loopback address, and the test sets the downstream pod's
// status.podIP to that address (as a kubelet would report it; KWOK keeps
// a pod's address once set). The physical cluster's own endpointslice
// controller then publishes it as the Service's endpoint: no
// EndpointSlice is written by hand for the real webhook.
//
// Rows: a validating webhook refuses a bad ConfigMap and admits a good
// one; a mutating one mutates; a CRD converts between versions through
// its Service; with the server killed (or, pull mode, the syncer's tunnel
// down), failurePolicy Fail refuses with a message naming the Service and
// the SyncTarget, Ignore admits; latency against a URL call. Security:
// another workspace's reference to the same namespace/name is not served
// by this workspace's pod; an EndpointSlice not made by the physical
// cluster's endpointslice controller (a tenant's, or one spoofing its
// label) is never dialed; a tenant cannot write EndpointSlices in its
// workspace.
func TestWebhooksServedByPods(t *testing.T) {
	bins := binaries(t)
	t.Run("pull", func(t *testing.T) { testWebhooksServedByPods(t, bins, false) })
	t.Run("push", func(t *testing.T) { testWebhooksServedByPods(t, bins, true) })
}

func testWebhooksServedByPods(t *testing.T, bins physical.Binaries, push bool) {
	ip := hostIP(t)
	ca := newWebhookCA(t, ip, "hook.default.svc", "decoy.default.svc")
	hook := startPodWebhook(t, ip, ca.cert)
	// trap is where a forged endpoint points: it must never be called.
	trap := startPodWebhook(t, ip, ca.cert)
	var args []string
	if push {
		// The physical cluster listens on loopback.
		args = append(args, "--push-mode", "--webhook-allowed-networks=127.0.0.0/8")
	}
	s := framework.StartServer(t, "", args...)
	const compute, teamA, teamB = "root:compute", "root:hooks-a", "root:hooks-b"
	s.CreateWorkspaces(compute, teamA, teamB)
	pc1 := startPhysical(t, bins, "pc1")["pc1"]
	var sp *syncerProc
	if push {
		registerPush(t, s, compute, "pc1", "eu", pc1, "")
	} else {
		sp = register(t, s, adminIn(t, s, compute), "pc1", "region=eu", pc1)
	}
	waitTargetsReady(t, s, compute, "pc1")
	for _, team := range []string{teamA, teamB} {
		s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec:
  locationWorkspace: `+compute+`
  locationSelector: {matchLabels: {region: eu}}
  namespaceSelector: {}
`))
		framework.Eventually(t, 60*time.Second, team+": default placed on pc1", func() (bool, string) {
			a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
			return a == compute+"/pc1", a
		})
	}
	down := downClient(t, pc1)
	nsA := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default")
	caBundle := base64.StdEncoding.EncodeToString(ca.caPEM)
	ctx := context.Background()

	// The application: a Deployment and its Service (port 443 to the
	// port the pod, played by the test, listens on).
	s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "app.yaml", fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: hook, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: hook}}
  template:
    metadata: {labels: {app: hook}}
    spec: {containers: [{name: hook, image: example.com/hook, ports: [{containerPort: %[1]d}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: hook, namespace: default}
spec:
  selector: {app: hook}
  ports: [{name: https, port: 443, targetPort: %[1]d}]
`, hook.port)))
	playPodIP(t, down, nsA, "app=hook", "hook", ip)

	// Its webhooks: validating (Fail and Ignore) and mutating.
	out := s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "hooks.yaml", hookConfigs(caBundle)))
	if strings.Contains(out, "Warning") {
		t.Errorf("webhook configurations whose Service runs on a physical cluster: unexpected warning:\n%s", out)
	}
	create := func(ws, name, label string, bad bool) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"webhook": label}}, Data: map[string]string{"bad": fmt.Sprint(bad)}}
		_, err := s.Client(ws).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	framework.Eventually(t, 60*time.Second, "the validating webhook refuses a bad ConfigMap", func() (bool, string) {
		err := create(teamA, "bad-"+framework.RandomSuffix(), "fail", true)
		return err != nil && strings.Contains(err.Error(), "the pod's webhook refuses bad=true"), fmt.Sprint(err)
	})
	if err := create(teamA, "good", "fail", false); err != nil {
		t.Errorf("the validating webhook refused a good ConfigMap: %v", err)
	}
	if !hook.saw("good") {
		t.Errorf("the webhook pod was not asked about the good ConfigMap")
	}
	framework.Eventually(t, 30*time.Second, "the mutating webhook mutates", func() (bool, string) {
		name := "mut-" + framework.RandomSuffix()
		if err := create(teamA, name, "mutate", false); err != nil {
			return false, err.Error()
		}
		got := s.Kubectl(teamA, "get", "configmap", name, "-o", "jsonpath={.metadata.labels.mutated}")
		return got == "by-pod", got
	})

	t.Run("a CRD converts through its Service", func(t *testing.T) {
		out := s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "crd.yaml", gadgetCRD(caBundle)))
		if strings.Contains(out, "Warning") {
			t.Errorf("a CRD whose conversion Service runs on a physical cluster: unexpected warning:\n%s", out)
		}
		s.WaitEstablished(teamA, "crd/gadgets.webhooks.example.com")
		s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "red.yaml", "apiVersion: webhooks.example.com/v1\nkind: Gadget\nmetadata: {name: red, namespace: default}\nspec: {color: red}\n"))
		framework.Eventually(t, 30*time.Second, "a v1 Gadget read at v2", func() (bool, string) {
			out, err := s.KubectlErr(teamA, "", "get", "gadgets.v2.webhooks.example.com", "red", "-o", "jsonpath={.apiVersion} {.spec.colour}")
			return err == nil && out == "webhooks.example.com/v2 red", out
		})
		s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "blue.yaml", "apiVersion: webhooks.example.com/v2\nkind: Gadget\nmetadata: {name: blue, namespace: default}\nspec: {colour: blue}\n"))
		if out := s.Kubectl(teamA, "get", "gadgets.v1.webhooks.example.com", "blue", "-o", "jsonpath={.spec.color}"); out != "blue" {
			t.Errorf("a v2 Gadget read at v1: spec.color %q", out)
		}
		if !hook.saw("red") || !hook.saw("blue") {
			t.Errorf("the conversions did not go through the webhook pod")
		}
	})

	t.Run("another workspace's reference does not reach this workspace's pod", func(t *testing.T) {
		// Team B, placed on the same physical cluster, names default/hook
		// too: it has no such Service, and A's is not B's.
		s.Kubectl(teamB, "apply", "-f", framework.WriteFile(t, "b.yaml", strings.ReplaceAll(hookConfigs(caBundle), "name: hook-", "name: b-hook-")))
		framework.Eventually(t, 60*time.Second, "B's webhook call fails (its namespace has no Service hook)", func() (bool, string) {
			err := create(teamB, "b-probe-"+framework.RandomSuffix(), "fail", false)
			return err != nil && strings.Contains(err.Error(), "Service default/hook") && strings.Contains(err.Error(), "SyncTarget pc1"), fmt.Sprint(err)
		})
		t.Logf("workspace B's call: %v", create(teamB, "b-probe-log", "fail", false))
		hook.mu.Lock()
		for name := range hook.seen {
			if strings.HasPrefix(name, "b-probe-") {
				t.Errorf("workspace B's object %s reached workspace A's webhook pod", name)
			}
		}
		hook.mu.Unlock()
		// A Service in a namespace placed nowhere: stored with a warning.
		out, err := s.KubectlErr(teamB, strings.ReplaceAll(strings.ReplaceAll(hookConfigs(caBundle), "name: hook-", "name: ghost-"), "namespace: default", "namespace: ghost"), "apply", "-f", "-")
		if err != nil || !strings.Contains(out, "no namespace ghost") {
			t.Errorf("a webhook naming a Service of a missing namespace: want it stored with a warning, got %v\n%s", err, out)
		}
	})

	t.Run("an EndpointSlice nobody's controller made is never dialed", func(t *testing.T) {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "decoy-forged", Labels: map[string]string{discoveryv1.LabelServiceName: "decoy", discoveryv1.LabelManagedBy: "tenant.example.com"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: ptrTo(int32(trap.port))}},
		}
		// In the workspace: EndpointSlices are the physical cluster's, even
		// for the workspace's own admin.
		s.GrantAccess("root", "hooks-admin", "hooks-a")
		s.Kubectl(teamA, "create", "clusterrolebinding", "hooks-admin", "--clusterrole=cluster-admin", "--user=hooks-admin")
		cfg := framework.UserConfig(t, s, "hooks-admin")
		cfg.Host += "/clusters/" + teamA
		tenant, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "the tenant admin may write ConfigMaps", func() (bool, string) {
			_, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + framework.RandomSuffix()}}, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err)
		})
		if _, err := tenant.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "read-only in a workspace") {
			t.Errorf("a tenant's EndpointSlice in its workspace: want a refusal, got %v", err)
		}
		// A Service selecting no pod, and forged slices on the physical
		// cluster: one by another manager, one with the controller's
		// label but not the controller's (no owner).
		s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "decoy.yaml", fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: decoy, namespace: default}
spec:
  selector: {app: nobody}
  ports: [{name: https, port: 443, targetPort: %d}]
`, trap.port)))
		framework.Eventually(t, 60*time.Second, "the decoy Service on the physical cluster", func() (bool, string) {
			_, err := down.CoreV1().Services(nsA).Get(ctx, "decoy", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
		// The forged slices point at the trap with everything else right:
		// an endpoint of a real, ready pod of the namespace (the webhook's),
		// the Service's port name; one is owned by the decoy Service but
		// managed by someone else, one carries the controller's label
		// without being the Service's.
		decoySvc, err := down.CoreV1().Services(nsA).Get(ctx, "decoy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := down.CoreV1().Pods(nsA).List(ctx, metav1.ListOptions{LabelSelector: "app=hook"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("the webhook's pod on the physical cluster: %v", err)
		}
		slice.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: nsA, Name: pods.Items[0].Name, UID: pods.Items[0].UID}
		owned := slice.DeepCopy()
		owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "decoy", UID: decoySvc.UID, Controller: ptrTo(true)}}
		if _, err := down.DiscoveryV1().EndpointSlices(nsA).Create(ctx, owned, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		spoof := slice.DeepCopy()
		spoof.Name, spoof.Labels[discoveryv1.LabelManagedBy] = "decoy-spoofed", "endpointslice-controller.k8s.io"
		if _, err := down.DiscoveryV1().EndpointSlices(nsA).Create(ctx, spoof, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		decoy := strings.ReplaceAll(strings.ReplaceAll(hookConfigs(caBundle), "name: hook-", "name: decoy-"), "name: hook,", "name: decoy,")
		s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "decoy-hooks.yaml", strings.ReplaceAll(decoy, "webhook: fail", "webhook: decoy")))
		framework.Eventually(t, 60*time.Second, "the decoy's webhook call fails: no endpoint of its pods", func() (bool, string) {
			err := create(teamA, "decoy-"+framework.RandomSuffix(), "decoy", false)
			return err != nil && strings.Contains(err.Error(), "Service default/decoy") && strings.Contains(err.Error(), "no ready endpoint"), fmt.Sprint(err)
		})
		t.Logf("forged endpoints only: %v", create(teamA, "decoy-log", "decoy", false))
		for _, name := range []string{"decoy-forged", "decoy-spoofed"} {
			// The physical cluster's controller may clean up a slice
			// carrying its label; the row counts only while it is there.
			if _, err := down.DiscoveryV1().EndpointSlices(nsA).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Logf("forged EndpointSlice %s was gone when called: %v", name, err)
			}
		}
		if n := trap.conns.Load(); n != 0 {
			t.Errorf("a forged endpoint was dialed %d times", n)
		}
		s.Kubectl(teamA, "delete", "validatingwebhookconfiguration", "decoy-fail", "decoy-ignore")
		s.Kubectl(teamA, "delete", "mutatingwebhookconfiguration", "decoy-mutate")
	})

	t.Run("latency", func(t *testing.T) {
		measureWebhookLatency(t, s, teamA, hook.port, ip, caBundle, push)
	})

	t.Run("the syncer dials only endpoints of Services it synced", func(t *testing.T) {
		testServiceDialsOfTheTunnel(t, pc1, compute, nsA, ca)
	})

	if !push {
		t.Run("without the syncer's tunnel the call fails saying so, and works again once it is back", func(t *testing.T) {
			sp.stop()
			framework.Eventually(t, 30*time.Second, "no tunnel: the call fails naming the Service, the cluster and the tunnel", func() (bool, string) {
				err := create(teamA, "notunnel-"+framework.RandomSuffix(), "fail", false)
				return err != nil && strings.Contains(err.Error(), "Service default/hook") && strings.Contains(err.Error(), "SyncTarget pc1") &&
					strings.Contains(err.Error(), "no tunnel open"), fmt.Sprint(err)
			})
			t.Logf("no tunnel: %v", create(teamA, "notunnel-log", "fail", false))
			sp.start()
			framework.Eventually(t, 60*time.Second, "the syncer back: the webhook is called again", func() (bool, string) {
				err := create(teamA, "back-"+framework.RandomSuffix(), "fail", true)
				return err != nil && strings.Contains(err.Error(), "the pod's webhook refuses bad=true"), fmt.Sprint(err)
			})
		})
	}

	t.Run("the failure policy applies when the pod is gone", func(t *testing.T) {
		hook.kill()
		framework.Eventually(t, 30*time.Second, "failurePolicy Fail refuses, naming the Service and the cluster", func() (bool, string) {
			err := create(teamA, "after-"+framework.RandomSuffix(), "fail", false)
			return err != nil && strings.Contains(err.Error(), "Service default/hook") && strings.Contains(err.Error(), "SyncTarget pc1"), fmt.Sprint(err)
		})
		t.Logf("with the server killed, failurePolicy Fail: %v", create(teamA, "after-log", "fail", false))
		if err := create(teamA, "ignored", "ignore", false); err != nil {
			t.Errorf("failurePolicy Ignore: the create was refused: %v", err)
		}
		// With no ready replica at all.
		s.Kubectl(teamA, "scale", "deployment", "hook", "--replicas=0")
		framework.Eventually(t, 60*time.Second, "no replica: the call fails saying so", func() (bool, string) {
			err := create(teamA, "none-"+framework.RandomSuffix(), "fail", false)
			// "no ready endpoint:", not "no ready endpoint reachable:"
			// (the pod still listed, its server gone).
			return err != nil && strings.Contains(err.Error(), "no ready endpoint:") && strings.Contains(err.Error(), "SyncTarget pc1"), fmt.Sprint(err)
		})
		t.Logf("no replica: %v", create(teamA, "none-log", "fail", false))
	})
}

func ptrTo[T any](v T) *T { return &v }

// hookConfigs are the application's webhook configurations, each matching
// ConfigMaps with its own label: validating with failurePolicy Fail
// (webhook=fail) and Ignore (webhook=ignore), mutating (webhook=mutate).
func hookConfigs(caBundle string) string {
	one := func(kind, name, path, policy, label string) string {
		return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: %s
metadata:
  name: %s
webhooks:
- name: %s.example.com
  clientConfig:
    service: {namespace: default, name: hook, path: %s, port: 443}
    caBundle: %s
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  failurePolicy: %s
  objectSelector: {matchLabels: {webhook: %s}}
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 10
`, kind, name, strings.TrimPrefix(name, "hook-"), path, caBundle, policy, label)
	}
	return one("ValidatingWebhookConfiguration", "hook-fail", "/validate", "Fail", "fail") + "---\n" +
		one("ValidatingWebhookConfiguration", "hook-ignore", "/validate", "Ignore", "ignore") + "---\n" +
		one("MutatingWebhookConfiguration", "hook-mutate", "/mutate", "Fail", "mutate")
}

// gadgetCRD has two versions converted by the Service hook.
func gadgetCRD(caBundle string) string {
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.webhooks.example.com}
spec:
  group: webhooks.example.com
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
  - {name: v2, served: true, storage: false, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        service: {namespace: default, name: hook, path: /convert, port: 443}
        caBundle: ` + caBundle + `
`
}

// testServiceDialsOfTheTunnel sends service dials to the syncer's tunnel
// handler directly (as kcp does through the tunnel): the workspace's
// Service is reached (TLS verified as the webhook's Service name), a
// Service of a namespace the syncer does not own, and one in its own
// namespace that it did not sync (made on the physical cluster, selecting
// the same pod), are refused.
func testServiceDialsOfTheTunnel(t *testing.T, pc *physical.Cluster, location, nsA string, ca webhookCA) {
	cfg, err := pc.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	h, err := syncer.TunnelHandler(cfg, workload.TargetKey(location, "pc1"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := context.Background()
	down := downClient(t, pc)
	if _, err := down.CoreV1().Services(nsA).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "unsynced"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "hook"}, Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dial := func(namespace, name string) (net.Conn, error) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return syncer.DialThroughTunnel(ctx, conn, namespace, name, 443)
	}
	conn, err := dial(nsA, "hook")
	if err != nil {
		t.Fatalf("dialing the workspace's webhook Service: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.caPEM)
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "hook.default.svc"})
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Errorf("TLS with the webhook's pod through the tunnel handler: %v", err)
	}
	tc.Close()
	for _, c := range []struct{ namespace, name, want string }{
		{"default", "kubernetes", "not one this syncer synced"},
		{"kube-system", "kube-dns", "not one this syncer synced"},
		{nsA, "unsynced", "not on the physical cluster"},
	} {
		if _, err := dial(c.namespace, c.name); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("a service dial of %s/%s: %v, want a refusal containing %q", c.namespace, c.name, err, c.want)
		}
	}
	// Only GET with the upgrade: a plain request is refused.
	resp, err := http.Get(srv.URL + syncer.ServiceDialPath(nsA, "hook", 443))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a service dial without the upgrade: %s, want 403", resp.Status)
	}
}

// measureWebhookLatency times ConfigMap creates in a workspace: matched by
// no webhook, by the validating webhook through its Service (the syncer's
// tunnel or kcp's own dial), and by the same webhook server called by URL
// from kcp directly. Every create must succeed; the percentiles are logged
// (docs/performance.md).
func measureWebhookLatency(t *testing.T, s *framework.Server, ws string, port int, ip net.IP, caBundle string, push bool) {
	url := fmt.Sprintf("https://%s/validate", net.JoinHostPort(ip.String(), itoa(port)))
	s.Kubectl(ws, "apply", "-f", framework.WriteFile(t, "url-hook.yaml", fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: url-hook}
webhooks:
- name: url.example.com
  clientConfig: {url: %q, caBundle: %s}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  failurePolicy: Fail
  objectSelector: {matchLabels: {webhook: url}}
  sideEffects: None
  admissionReviewVersions: [v1]
`, url, caBundle)))
	defer s.Kubectl(ws, "delete", "validatingwebhookconfiguration", "url-hook")
	client := s.Client(ws)
	ctx := context.Background()
	framework.Eventually(t, 30*time.Second, "the URL webhook is in effect", func() (bool, string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "url-" + framework.RandomSuffix(), Labels: map[string]string{"webhook": "url"}}, Data: map[string]string{"bad": "true"}}
		_, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "the pod's webhook refuses"), fmt.Sprint(err)
	})
	const n = 200
	mode := "pull (syncer tunnel)"
	if push {
		mode = "push (kcp dials the pod)"
	}
	// Interleaved, so that the load of the machine weighs on each alike.
	cases := []struct{ what, label string }{{"no webhook", "none"}, {"Service, " + mode, "fail"}, {"URL, direct", "url"}}
	took := make([][]time.Duration, len(cases))
	for i := 0; i < n; i++ {
		for j, c := range cases {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lat-%s-%d", c.label, i), Labels: map[string]string{"webhook": c.label}}}
			began := time.Now()
			if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: create %d: %v", c.what, i, err)
			}
			took[j] = append(took[j], time.Since(began))
		}
	}
	for j, c := range cases {
		d := took[j]
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		t.Logf("create latency, %-34s p50 %6.2f ms  p99 %6.2f ms  (n=%d)", c.what+":", ms(d[n/2]), ms(d[n*99/100]), n)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
