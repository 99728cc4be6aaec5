package multicluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// hostIP is this machine's first global unicast IPv4 address: an
// EndpointSlice may not hold a loopback address, and the test's webhook
// server must be an endpoint.
func hostIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.To4()
		}
	}
	t.Skip("no global unicast IPv4 address on this machine for a pod's endpoint")
	return nil
}

// webhookCA is a CA and a serving certificate for the given DNS names
// and IP address.
type webhookCA struct {
	caPEM []byte
	cert  tls.Certificate
}

func newWebhookCA(t *testing.T, ip net.IP, names ...string) webhookCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names, IPAddresses: []net.IP{ip},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return webhookCA{
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert:  tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key},
	}
}

// podWebhook is the test playing a webhook pod: a real HTTPS server on
// this machine's address that validates (refuses ConfigMaps with
// data.bad=true), mutates (labels ConfigMaps mutated=by-pod) and converts
// (Gadget v1 spec.color <-> v2 spec.colour). It records the names of the
// objects it was asked about.
type podWebhook struct {
	srv   *http.Server
	ln    net.Listener
	port  int
	conns atomic.Int64
	mu    sync.Mutex
	seen  map[string]bool
}

func startPodWebhook(t *testing.T, ip net.IP, cert tls.Certificate) *podWebhook {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	w := &podWebhook{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, seen: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", w.admit(func(cm *corev1.ConfigMap, resp *admissionv1.AdmissionResponse) {
		if cm.Data["bad"] == "true" {
			resp.Allowed = false
			resp.Result = &metav1.Status{Message: "the pod's webhook refuses bad=true", Code: http.StatusForbidden}
		}
	}))
	mux.HandleFunc("/mutate", w.admit(func(cm *corev1.ConfigMap, resp *admissionv1.AdmissionResponse) {
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
		resp.Patch = []byte(`[{"op":"add","path":"/metadata/labels/mutated","value":"by-pod"}]`)
	}))
	mux.HandleFunc("/convert", w.convert)
	w.srv = &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				w.conns.Add(1)
			}
		}}
	go w.srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { w.srv.Close() })
	return w
}

// kill stops the server: its port refuses connections from now on.
func (w *podWebhook) kill() { w.srv.Close() }

func (w *podWebhook) saw(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[name]
}

func (w *podWebhook) admit(decide func(*corev1.ConfigMap, *admissionv1.AdmissionResponse)) http.HandlerFunc {
	return func(rw http.ResponseWriter, req *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, "bad review", http.StatusBadRequest)
			return
		}
		var cm corev1.ConfigMap
		_ = json.Unmarshal(review.Request.Object.Raw, &cm)
		w.mu.Lock()
		w.seen[review.Request.Name] = true
		w.mu.Unlock()
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		decide(&cm, resp)
		review.Response, review.Request = resp, nil
		rw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(rw).Encode(review)
	}
}

func (w *podWebhook) convert(rw http.ResponseWriter, req *http.Request) {
	var review apiextensionsv1.ConversionReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(rw, "bad review", http.StatusBadRequest)
		return
	}
	resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, raw := range review.Request.Objects {
		var u unstructured.Unstructured
		if err := json.Unmarshal(raw.Raw, &u.Object); err != nil {
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			break
		}
		w.mu.Lock()
		w.seen[u.GetName()] = true
		w.mu.Unlock()
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		if spec == nil {
			spec = map[string]interface{}{}
		}
		to := review.Request.DesiredAPIVersion
		switch {
		case to == "webhooks.example.com/v2" && spec["color"] != nil:
			spec["colour"] = spec["color"]
			delete(spec, "color")
		case to == "webhooks.example.com/v1" && spec["colour"] != nil:
			spec["color"] = spec["colour"]
			delete(spec, "colour")
		}
		u.Object["spec"] = spec
		u.SetAPIVersion(to)
		out, _ := json.Marshal(u.Object)
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	review.Response, review.Request = resp, nil
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(review)
}

// playPodIP makes the downstream pods of a Service's selector on a
// physical cluster have ip as their address, as a kubelet and CNI would
// report it: KWOK runs no containers, so the test process serves in the
// pod's place (its webhook server listens on ip), and the physical
// cluster's endpointslice controller publishes the pod's new address as
// the Service's endpoint. The Service's targetPort is the server's port.
// It waits until the controller's EndpointSlice shows ip ready.
func playPodIP(t *testing.T, down kubernetes.Interface, namespace, selector, service string, ip net.IP) {
	t.Helper()
	ctx := context.Background()
	framework.Eventually(t, 90*time.Second, "the webhook pod runs on the physical cluster with the test's address", func() (bool, string) {
		pods, err := down.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) == 0 {
			return false, fmt.Sprint(err)
		}
		for _, p := range pods.Items {
			if p.Status.PodIP == ip.String() {
				continue
			}
			if p.Status.PodIP == "" {
				return false, "pod " + p.Name + " has no address yet"
			}
			patch := fmt.Sprintf(`{"status":{"podIP":%q,"podIPs":[{"ip":%q}]}}`, ip, ip)
			if _, err := down.CoreV1().Pods(namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	framework.Eventually(t, 60*time.Second, "the endpointslice controller publishes the pod's address", func() (bool, string) {
		slices, err := down.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) > 0 && ep.Addresses[0] == ip.String() && ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					return true, ""
				}
			}
		}
		b, _ := json.Marshal(slices.Items)
		return false, string(b)
	})
}

func itoa(i int) string { return strconv.Itoa(i) }
