// Package shards describes the installations (shards) that together serve
// one workspace tree, each on a database of its own, behind a front proxy
// (kcp front-proxy). Every shard and every front proxy reads the same shards
// file and shares one CA: a shard calls another as a shard
// (PeerUser, group PeersGroup, a client certificate of that CA) to create,
// close and delete a workspace whose parent it holds; the front proxy
// passes a client-certificate user on to a shard in request headers that a
// shard believes only from a connection with the front proxy's certificate
// (ProxyUser).
package shards

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kcpsql/kcp/server/pki"
)

// RootShard is the name of the shard that holds the root workspace.
const RootShard = "root"

// PeersGroup is the group of shards calling each other. Like the server's
// own loopback identity, it may act in a logical cluster that does not
// exist yet or is being deleted (creating a child workspace on another
// shard, deleting it), and only a holder of the CA can issue it.
const PeersGroup = "system:kcp:shards"

// PeerUser is the user a shard calls other shards as.
func PeerUser(shard string) string { return "system:kcp:shard:" + shard }

// ProxyUser is the common name of the front proxy's client certificate,
// the only one whose request headers (X-Remote-User, X-Remote-Group,
// X-Remote-Extra-*) a shard believes.
const ProxyUser = "system:kcp:front-proxy"

// Header names of the front proxy's request-header authentication.
const (
	UserHeader        = "X-Remote-User"
	GroupHeader       = "X-Remote-Group"
	ExtraHeaderPrefix = "X-Remote-Extra-"
)

// ViewPartHeader asks a shard for its part of an APIExport's view across
// all consumers (the consumers it holds), which the front proxy merges
// with the other shards' parts. Without it, a shard answers a view request
// across all consumers only when no consumer is on another shard (a part
// is never presented as the whole).
const ViewPartHeader = "X-Kcp-View-Part"

// Shard is one installation.
type Shard struct {
	// Name is how Workspaces (spec.shard) and operators name it.
	Name string `json:"name"`
	// URL is where the shard's API is served (https://host:port).
	URL string `json:"url"`
}

// Config is the shards file.
type Config struct {
	Shards []Shard `json:"shards"`
	// ExternalURL is the front proxy's address as clients reach it: the
	// URL a Workspace's status gives (its status.URL). Empty: the shard's
	// own URL.
	ExternalURL string `json:"externalURL,omitempty"`
}

// Load reads and validates a shards file.
func Load(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the shards file: %v", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return nil, fmt.Errorf("shards file %s: %v", path, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("shards file %s: %v", path, err)
	}
	return &c, nil
}

func (c *Config) validate() error {
	if len(c.Shards) == 0 {
		return fmt.Errorf("it names no shard (shards: [{name: root, url: https://...}, ...])")
	}
	seen := map[string]bool{}
	for i, s := range c.Shards {
		if errs := validation.IsDNS1123Label(s.Name); len(errs) > 0 {
			return fmt.Errorf("shards[%d].name %q: %s", i, s.Name, strings.Join(errs, "; "))
		}
		if seen[s.Name] {
			return fmt.Errorf("shard %q is named twice", s.Name)
		}
		seen[s.Name] = true
		u, err := url.Parse(s.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("shard %q: url %q must be https://host:port", s.Name, s.URL)
		}
	}
	if !seen[RootShard] {
		return fmt.Errorf("no shard is named %q: that shard holds the root workspace", RootShard)
	}
	if c.ExternalURL != "" {
		u, err := url.Parse(c.ExternalURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("externalURL %q must be https://host:port", c.ExternalURL)
		}
	}
	return nil
}

// Get returns the shard of that name.
func (c *Config) Get(name string) (Shard, bool) {
	for _, s := range c.Shards {
		if s.Name == name {
			return s, true
		}
	}
	return Shard{}, false
}

// Names lists the shards' names, sorted.
func (c *Config) Names() []string {
	out := make([]string, 0, len(c.Shards))
	for _, s := range c.Shards {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return out
}

// Credentials of a shard or front proxy, issued by the shared CA into the
// root directory.
func peerCert(f pki.Files) (string, string) {
	return filepath.Join(f.Dir, "shard-client.crt"), filepath.Join(f.Dir, "shard-client.key")
}

func proxyCert(f pki.Files) (string, string) {
	return filepath.Join(f.Dir, "front-proxy-client.crt"), filepath.Join(f.Dir, "front-proxy-client.key")
}

// EnsurePeerCert issues this shard's client certificate for calls to the
// other shards (PeerUser, groups system:masters and PeersGroup).
func EnsurePeerCert(f pki.Files, self string) error {
	crt, key := peerCert(f)
	return pki.EnsureCert(f, crt, key, pkix.Name{CommonName: PeerUser(self), Organization: []string{"system:masters", PeersGroup}}, nil, x509.ExtKeyUsageClientAuth)
}

// EnsureProxyCert issues the front proxy's client certificate (ProxyUser,
// no group: alone it may do nothing).
func EnsureProxyCert(f pki.Files) error {
	crt, key := proxyCert(f)
	return pki.EnsureCert(f, crt, key, pkix.Name{CommonName: ProxyUser}, nil, x509.ExtKeyUsageClientAuth)
}

// PeerConfig is a client configuration for calls from this shard to s.
func PeerConfig(f pki.Files, s Shard) *rest.Config {
	crt, key := peerCert(f)
	return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: f.CACert(), CertFile: crt, KeyFile: key},
		QPS: 50, Burst: 100, UserAgent: "kcp-shard"}
}

// ProxyTLS names the front proxy's client certificate and the CA.
func ProxyTLS(f pki.Files) (caFile, certFile, keyFile string) {
	crt, key := proxyCert(f)
	return f.CACert(), crt, key
}

// Membership is this server's place in a sharded installation: nil Config
// (no --shards-file) is an installation of one server.
type Membership struct {
	// Self is this shard's name.
	Self   string
	Config *Config
	// Files are this shard's credentials (the shared CA's).
	Files pki.Files
}

// Sharded reports whether the server is one shard of several.
func (m *Membership) Sharded() bool { return m != nil && m.Config != nil }

// Remote reports whether shard names another shard than this one (""
// names this one: a workspace created before sharding, or unsharded).
func (m *Membership) Remote(shard string) bool {
	return m.Sharded() && shard != "" && shard != m.Self
}

// Peer is the client configuration for calls to the shard of that name.
func (m *Membership) Peer(name string) (*rest.Config, error) {
	if !m.Sharded() {
		return nil, fmt.Errorf("this server is not one of several shards (kcp start --shards-file)")
	}
	s, ok := m.Config.Get(name)
	if !ok {
		return nil, fmt.Errorf("shard %q is not in the shards file (it has: %s)", name, strings.Join(m.Config.Names(), ", "))
	}
	return PeerConfig(m.Files, s), nil
}
