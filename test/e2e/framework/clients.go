package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

// UserClient returns an HTTP client authenticating with a client certificate
// signed by the server's CA for the given user and groups.
func UserClient(t testing.TB, s *Server, user string, groups ...string) *http.Client {
	t.Helper()
	tlsConfig, err := rest.TLSConfigFor(UserConfig(t, s, user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	// A plain transport: some tests tune it (HTTP/1 only, connection reuse).
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
}

// UserConfig is a client configuration of root with a client certificate
// signed by the server's CA for the given user and groups.
func UserConfig(t testing.TB, s *Server, user string, groups ...string) *rest.Config {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(s.RootDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := keyutil.PrivateKeyFromFile(filepath.Join(s.RootDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: s.URL(), TLSClientConfig: rest.TLSClientConfig{
		CAData:   caPEM,
		CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}}
}

// Do sends one request with c and returns the status code and body.
func Do(t testing.TB, c *http.Client, method, url, body string) (int, string) {
	t.Helper()
	return DoWith(t, c, method, url, body, nil)
}

// DoWith is Do with extra request headers (content type, impersonation,
// bearer token).
func DoWith(t testing.TB, c *http.Client, method, url, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// UserKubeconfig writes a kubeconfig for user (a client certificate signed
// by kcp's CA) whose server is server (a workspace's URL, a view's, or the
// base URL to be given with --server).
func UserKubeconfig(t testing.TB, s *Server, server, user string) string {
	t.Helper()
	cfg := UserConfig(t, s, user)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kcp"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["kcp"] = &clientcmdapi.Context{Cluster: "kcp", AuthInfo: user}
	kc.CurrentContext = "kcp"
	p := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}
