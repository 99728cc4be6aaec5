package multicluster

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// certManager is the release whose Helm chart (deploy/charts/cert-manager in
// the module's zip) is rendered by helm and applied unchanged.
const certManager = "github.com/cert-manager/cert-manager@v1.21.2"

// issuerWebhook plays cert-manager's webhook pod: it refuses an Issuer that
// names no kind of issuer (as cert-manager's own validation does) and
// admits the others; it records what it was asked about.
type issuerWebhook struct {
	mu   sync.Mutex
	seen []string
}

func (w *issuerWebhook) serve(rw http.ResponseWriter, req *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(rw, "bad review", http.StatusBadRequest)
		return
	}
	var obj unstructured.Unstructured
	_ = json.Unmarshal(review.Request.Object.Raw, &obj.Object)
	w.mu.Lock()
	w.seen = append(w.seen, req.URL.Path+" "+review.Request.Kind.Kind+" "+review.Request.Name)
	w.mu.Unlock()
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if req.URL.Path == "/validate" && review.Request.Kind.Kind == "Issuer" {
		spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
		found := false
		for _, k := range []string{"acme", "ca", "vault", "selfSigned", "venafi"} {
			if _, ok := spec[k]; ok {
				found = true
			}
		}
		if !found {
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "spec: Required value: no issuer type is configured (the test's cert-manager webhook pod)"}
		}
	}
	review.Response, review.Request = resp, nil
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(review)
}

func (w *issuerWebhook) saw(what string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.seen {
		if strings.Contains(s, what) {
			return true
		}
	}
	return false
}

// TestCertManagerInstallsUnchanged: cert-manager's own Helm chart, installed
// with helm as its documentation says, in a placed workspace (CRDs, ClusterRoles,
// webhook configurations, Deployments, its leader-election Roles in
// kube-system). Its Deployments run on the physical cluster; its webhook
// configurations name the Service cert-manager-webhook, which kcp calls on
// the webhook's pod there. The test plays two pods (KWOK runs no
// containers): the webhook (a real HTTPS server on this machine's address,
// the pod's address on the physical cluster, on the container port the
// Service's named targetPort means) and the cainjector (it writes the
// webhook's CA into the configurations in the workspace, as cainjector
// does through its in-cluster configuration). Then an Issuer is admitted
// by that webhook and one without an issuer type is refused by it: the
// workspace no longer breaks itself by installing cert-manager (the
// issue's "address not allowed").
func TestCertManagerInstallsUnchanged(t *testing.T) {
	bins := binaries(t)
	helm, err := physical.EnsureHelm(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	chart := moduleDir(t, certManager, "deploy/charts/cert-manager")

	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:certs"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	down := downClient(t, pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	placeAll(t, s, team, compute, "pc1")
	// As cert-manager's documentation installs it, against the workspace.
	dir := t.TempDir()
	cmd := exec.Command(helm, "install", "cert-manager", chart, "--namespace", "cert-manager", "--create-namespace", "--set", "crds.enabled=true", "--timeout", "3m")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+adminIn(t, s, team), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm install cert-manager (its chart, unchanged): %v\n%s", err, out)
	}
	for _, d := range []string{"cert-manager", "cert-manager-webhook", "cert-manager-cainjector"} {
		if out, err := s.KubectlErr(team, "", "-n", "cert-manager", "rollout", "status", "deployment/"+d, "--timeout=120s"); err != nil {
			t.Fatalf("rollout status deployment/%s: %v\n%s", d, err, out)
		}
	}

	// The webhook pod, played.
	ip := hostIP(t)
	ca := newWebhookCA(t, ip, "cert-manager-webhook.cert-manager.svc")
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "10250")) // the chart's container port "https"
	if err != nil {
		t.Fatalf("listening where cert-manager's webhook pod listens: %v", err)
	}
	hook := &issuerWebhook{}
	srv := &http.Server{Handler: http.HandlerFunc(hook.serve), TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	dns := syncer.DownstreamNamespace(logicalcluster.Name(team), "cert-manager")
	playPodIP(t, down, dns, "app.kubernetes.io/component=webhook", "cert-manager-webhook", ip)

	// The cainjector, played: the CA into both configurations.
	bundle := base64.StdEncoding.EncodeToString(ca.caPEM)
	for _, kind := range []string{"validatingwebhookconfiguration", "mutatingwebhookconfiguration"} {
		s.Kubectl(team, "patch", kind, "cert-manager-webhook", "--type=json", "-p", `[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"`+bundle+`"}]`)
	}

	s.Kubectl(team, "create", "namespace", "apps")
	issuer := `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned, namespace: apps}
spec: {selfSigned: {}}
`
	defer func() {
		if t.Failed() {
			t.Logf("webhook configurations:\n%s", s.Kubectl(team, "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "yaml"))
		}
	}()
	framework.Eventually(t, 60*time.Second, "an Issuer admitted by cert-manager's webhook", func() (bool, string) {
		out, err := s.KubectlErr(team, issuer, "apply", "-f", "-")
		hook.mu.Lock()
		seen := strings.Join(hook.seen, ", ")
		hook.mu.Unlock()
		return err == nil && hook.saw("/validate Issuer selfsigned"), "the webhook saw: [" + seen + "] " + out
	})
	out2, err := s.KubectlErr(team, `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: nothing, namespace: apps}
spec: {}
`, "apply", "-f", "-")
	if err == nil || !strings.Contains(out2, "no issuer type is configured") {
		t.Errorf("an Issuer without an issuer type: want cert-manager's webhook's refusal, got %v\n%s", err, out2)
	}
	// Deleting the webhook pod's server: the webhook's failurePolicy (Fail)
	// refuses, naming the Service.
	srv.Close()
	out3, err := s.KubectlErr(team, strings.ReplaceAll(issuer, "selfsigned", "second"), "apply", "-f", "-")
	if err == nil || !strings.Contains(out3, "cert-manager/cert-manager-webhook") {
		t.Errorf("with the webhook pod gone: want a refusal naming the Service, got %v\n%s", err, out3)
	}
}
