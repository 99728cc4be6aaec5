package physical

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	metricsresource "sigs.k8s.io/kwok/kustomize/metrics/resource"
	metricsusage "sigs.k8s.io/kwok/kustomize/metrics/usage"

	"github.com/kcpsql/kcp/server/pki"
)

// A cluster started with Options.Metrics serves metrics.k8s.io as a real
// one does: kwok simulates every fake node's kubelet resource metrics
// (/metrics/nodes/<node>/metrics/resource, kwok's Metric configuration,
// with each pod's usage from its annotations UsageCPUAnnotation and
// UsageMemoryAnnotation, 1m and 1Mi without: kwok's
// ClusterResourceUsage); the real metrics-server scrapes them (the nodes'
// annotation metrics.k8s.io/resource-metrics-path tells it the path) and
// is registered as the APIService v1beta1.metrics.k8s.io, which the
// cluster's aggregator reaches through an ExternalName Service, with the
// front-proxy client certificate kube-apiserver authenticates users to it
// with. A pod's CPU shows after two scrapes (metrics-server computes a
// rate), so up to 2 × MetricResolution after it started.
const (
	UsageCPUAnnotation    = "kwok.x-k8s.io/usage-cpu"
	UsageMemoryAnnotation = "kwok.x-k8s.io/usage-memory"
	MetricResolution      = 10 * time.Second
)

// MetricsServerVersion is the metrics-server tests run, built from the Go
// module proxy.
const MetricsServerVersion = "v0.8.0"

// MetricsServerDir is where metrics-server is kept: once per machine and
// version.
func MetricsServerDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "kcp-bench", "metrics-server-"+MetricsServerVersion)
}

// EnsureMetricsServer builds metrics-server once per machine, with its
// own module (it is no dependency of ours), and returns its path.
func EnsureMetricsServer(log func(string, ...any)) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	out := filepath.Join(MetricsServerDir(), "metrics-server")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(MetricsServerDir(), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(MetricsServerDir(), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	log("building metrics-server %s from the Go module proxy into %s (minutes on a cold cache) ...", MetricsServerVersion, MetricsServerDir())
	start := time.Now()
	pkg := "sigs.k8s.io/metrics-server/cmd/metrics-server@" + MetricsServerVersion
	cmd := exec.Command("go", "install", "-ldflags", "-s -w", pkg)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building metrics-server (go install %s; needs the Go module proxy): %v\n%s", pkg, err, b)
	}
	log("built metrics-server %s in %s", MetricsServerVersion, time.Since(start).Round(time.Second))
	return out, os.Rename(filepath.Join(tmp, "metrics-server"), out)
}

const frontProxyName = "front-proxy-client"

// frontProxyFlags are kube-apiserver's flags of the aggregation layer:
// requests it proxies to an APIService carry the user in X-Remote-*
// headers, authenticated by a client certificate of the cluster's CA
// whose name only the API server's own has.
func (c *Cluster) frontProxyFlags() ([]string, error) {
	f := c.files()
	cert, key := filepath.Join(f.Dir, frontProxyName+".crt"), filepath.Join(f.Dir, frontProxyName+".key")
	if err := pki.EnsureCert(f, cert, key, pkix.Name{CommonName: frontProxyName}, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return []string{"--requestheader-client-ca-file=" + f.CACert(), "--requestheader-allowed-names=" + frontProxyName,
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + cert, "--proxy-client-key-file=" + key}, nil
}

// kwokMetricsConfig is kwok's configuration of the simulated kubelet
// resource metrics and pod usage (kwok's own defaults).
func kwokMetricsConfig() []string {
	return []string{metricsresource.DefaultMetricsResource, metricsusage.DefaultUsageFromAnnotation}
}

// nodeMetricsAnnotations tell metrics-server where kwok serves a node's
// resource metrics.
func nodeMetricsAnnotations(node string) map[string]string {
	return map[string]string{"metrics.k8s.io/resource-metrics-path": "/metrics/nodes/" + node + "/metrics/resource"}
}

const metricsService = "metrics-server"

// startMetricsServer runs metrics-server and registers it as the
// APIService of metrics.k8s.io/v1beta1; it waits until the APIService is
// Available.
func (c *Cluster) startMetricsServer(ctx context.Context) error {
	bin, err := EnsureMetricsServer(c.opts.Log)
	if err != nil {
		return err
	}
	portFile := filepath.Join(c.Dir, "metrics-server-port")
	if b, err := os.ReadFile(portFile); err == nil {
		fmt.Sscan(string(b), &c.MetricsServerPort)
	} else {
		if c.MetricsServerPort, err = freePort(); err != nil {
			return err
		}
		os.WriteFile(portFile, []byte(fmt.Sprint(c.MetricsServerPort)), 0o600)
	}
	f := c.files()
	cert, key := filepath.Join(f.Dir, metricsService+".crt"), filepath.Join(f.Dir, metricsService+".key")
	// The aggregator checks the name <service>.<namespace>.svc.
	hosts := []string{metricsService + ".kube-system.svc", "127.0.0.1", "localhost"}
	if err := pki.EnsureCert(f, cert, key, pkix.Name{CommonName: metricsService}, hosts, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	if _, err := c.run("metrics-server", nil, bin,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", c.MetricsServerPort),
		"--tls-cert-file="+cert, "--tls-private-key-file="+key,
		"--kubeconfig="+c.Kubeconfig, "--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		// kwok's kubelet endpoint, on every node's InternalIP (127.0.0.1),
		// with kwok's self-signed certificate.
		fmt.Sprintf("--kubelet-port=%d", c.KubeletPort), "--kubelet-preferred-address-types=InternalIP", "--kubelet-insecure-tls",
		"--metric-resolution="+MetricResolution.String(), "--kubelet-request-timeout=5s",
	); err != nil {
		return err
	}
	client, err := c.Client()
	if err != nil {
		return err
	}
	port := int32(c.MetricsServerPort)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: metricsService, Namespace: "kube-system"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port}}},
	}
	if _, err := client.CoreV1().Services("kube-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("metrics-server Service: %v", err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	agg, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(f.CACert())
	if err != nil {
		return err
	}
	apiService := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "metrics.k8s.io", Version: "v1beta1",
			Service:  &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: metricsService, Port: &port},
			CABundle: ca, GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, apiService, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("APIService v1beta1.metrics.k8s.io: %v", err)
	}
	return poll(ctx, 90*time.Second, func() error {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, apiService.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiregistrationv1.Available && cond.Status == apiregistrationv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("APIService v1beta1.metrics.k8s.io not Available: %+v\n%s", got.Status.Conditions, c.LogTail("metrics-server", 10))
	})
}
