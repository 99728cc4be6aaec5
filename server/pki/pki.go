// Package pki owns the credentials in the root directory: a CA, the serving
// certificate, the admin's client certificate (system:masters), the
// service-account signing key and admin.kubeconfig. Existing files are reused,
// so a restarted server keeps its identity and issued tokens stay valid.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Files names everything pki keeps in the root directory.
type Files struct {
	Dir string
}

func (f Files) path(name string) string   { return filepath.Join(f.Dir, name) }
func (f Files) CACert() string            { return f.path("ca.crt") }
func (f Files) CAKey() string             { return f.path("ca.key") }
func (f Files) ServingCert() string       { return f.path("apiserver.crt") }
func (f Files) ServingKey() string        { return f.path("apiserver.key") }
func (f Files) AdminCert() string         { return f.path("admin.crt") }
func (f Files) AdminKey() string          { return f.path("admin.key") }
func (f Files) ServiceAccountKey() string { return f.path("service-account.key") }
func (f Files) AdminKubeconfig() string   { return f.path("admin.kubeconfig") }

const validity = 10 * 365 * 24 * time.Hour

// Ensure creates whatever is missing. hosts are the serving certificate's
// names and addresses; server is the URL written into admin.kubeconfig.
func Ensure(f Files, hosts []string, server string) error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return fmt.Errorf("creating root directory %s: %v", f.Dir, err)
	}
	ca, caKey, err := ensureCA(f)
	if err != nil {
		return err
	}
	if !exists(f.ServingCert()) || !exists(f.ServingKey()) {
		if err := issue(f.ServingCert(), f.ServingKey(), ca, caKey, pkix.Name{CommonName: "kcp"}, hosts, x509.ExtKeyUsageServerAuth); err != nil {
			return err
		}
	}
	if !exists(f.AdminCert()) || !exists(f.AdminKey()) {
		subject := pkix.Name{CommonName: "kcp-admin", Organization: []string{"system:masters"}}
		if err := issue(f.AdminCert(), f.AdminKey(), ca, caKey, subject, nil, x509.ExtKeyUsageClientAuth); err != nil {
			return err
		}
	}
	if !exists(f.ServiceAccountKey()) {
		// ECDSA P-256 (tokens signed ES256, which the API server and
		// client libraries verify as they do RS256): an RSA-2048 key took
		// 50-250 ms of a first start to generate. A key file that exists,
		// RSA included, is used as it is.
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		if err := writeKey(f.ServiceAccountKey(), key); err != nil {
			return err
		}
	}
	return writeKubeconfig(f, server)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func ensureCA(f Files) (*x509.Certificate, crypto.Signer, error) {
	if exists(f.CACert()) && exists(f.CAKey()) {
		certs, err := certutil.CertsFromFile(f.CACert())
		if err != nil {
			return nil, nil, fmt.Errorf("reading %s: %v", f.CACert(), err)
		}
		key, err := keyutil.PrivateKeyFromFile(f.CAKey())
		if err != nil {
			return nil, nil, fmt.Errorf("reading %s: %v", f.CAKey(), err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, nil, fmt.Errorf("%s is not a signing key", f.CAKey())
		}
		return certs[0], signer, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "kcp-ca"}, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKey(f.CAKey(), key); err != nil {
		return nil, nil, err
	}
	if err := certutil.WriteCert(f.CACert(), encodeCert(ca.Raw)); err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

func issue(certFile, keyFile string, ca *x509.Certificate, caKey crypto.Signer, subject pkix.Name, hosts []string, usage x509.ExtKeyUsage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	if err := writeKey(keyFile, key); err != nil {
		return err
	}
	return certutil.WriteCert(certFile, encodeCert(der))
}

func writeKey(path string, key crypto.PrivateKey) error {
	der, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	return keyutil.WriteKey(path, der)
}

// writeKubeconfig (re)writes admin.kubeconfig: context "root" points at the
// root logical cluster, context "base" at the server without a cluster prefix
// (which also means root). kubectl kcp ws edits the server URL's path.
func writeKubeconfig(f Files, server string) error {
	caData, err := os.ReadFile(f.CACert())
	if err != nil {
		return err
	}
	certData, err := os.ReadFile(f.AdminCert())
	if err != nil {
		return err
	}
	keyData, err := os.ReadFile(f.AdminKey())
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["root"] = &clientcmdapi.Cluster{Server: server + "/clusters/root", CertificateAuthorityData: caData}
	cfg.Clusters["base"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos["kcp-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: certData, ClientKeyData: keyData}
	cfg.Contexts["root"] = &clientcmdapi.Context{Cluster: "root", AuthInfo: "kcp-admin"}
	cfg.Contexts["base"] = &clientcmdapi.Context{Cluster: "base", AuthInfo: "kcp-admin"}
	cfg.CurrentContext = "root"
	return clientcmd.WriteToFile(*cfg, f.AdminKubeconfig())
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// EnsureCert issues a certificate of subject for usage (client or server
// authentication; hosts are a serving certificate's names and addresses),
// signed by f's CA, into certFile and keyFile unless both exist: a
// physical cluster's front-proxy client certificate and its
// metrics-server's serving certificate in tests, for instance.
func EnsureCert(f Files, certFile, keyFile string, subject pkix.Name, hosts []string, usage x509.ExtKeyUsage) error {
	if exists(certFile) && exists(keyFile) {
		return nil
	}
	ca, caKey, err := ensureCA(f)
	if err != nil {
		return err
	}
	return issue(certFile, keyFile, ca, caKey, subject, hosts, usage)
}
