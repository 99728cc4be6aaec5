package crds

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// gatewayAPI is a widely used CRD bundle with large schemas, many versions
// and CEL rules: the Kubernetes Gateway API, fetched as a Go module.
const gatewayAPI = "sigs.k8s.io/gateway-api@v1.6.3"

func gatewayAPIDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(moduleDir(t, gatewayAPI), "config", "crd")
}

// moduleDir downloads a Go module (outside our module) and returns its
// directory: public CRD bundles come from their projects' modules.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = t.TempDir() // outside our module: no go.mod changes
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s (needs the Go module proxy): %v\n%s", module, err, out)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %v\n%s", module, err, out)
	}
	return m.Dir
}

// TestRealWorldCRDs installs the Gateway API's standard channel in one
// workspace and its experimental channel (other versions, more kinds) in
// another, at the same time, and uses them.
func TestRealWorldCRDs(t *testing.T) {
	dir := gatewayAPIDir(t)
	s := framework.StartServer(t, "")
	const std, exp = "root:gw-standard", "root:gw-experimental"
	s.CreateWorkspaces(std, exp)

	done := make(chan string, 2)
	for cluster, channel := range map[string]string{std: "standard", exp: "experimental"} {
		files, _ := filepath.Glob(filepath.Join(dir, channel, "gateway.networking*.yaml"))
		args := []string{"apply", "--server-side"}
		for _, f := range files {
			args = append(args, "-f", f)
		}
		go func() {
			out, err := s.KubectlErr(cluster, "", args...)
			if err != nil {
				done <- cluster + ": " + err.Error() + "\n" + out
				return
			}
			done <- ""
		}()
	}
	for range 2 {
		if msg := <-done; msg != "" {
			t.Fatal(msg)
		}
	}
	for _, c := range []string{std, exp} {
		s.WaitEstablished(c, "crd", "--all")
	}
	framework.MustNotContain(t, "x-k8s.io kinds in standard", s.Kubectl(std, "api-resources"), "xbackends")
	framework.MustContain(t, "x-k8s.io kinds in experimental", s.Kubectl(exp, "api-resources"), "xbackends")
	framework.MustNotContain(t, "gateway API in root", s.Kubectl("root", "api-resources"), "httproutes")

	objects := `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: example}
spec: {controllerName: example.com/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: default}
spec:
  gatewayClassName: example
  listeners:
  - {name: http, protocol: HTTP, port: 80}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: default}
spec:
  parentRefs: [{name: web}]
  rules:
  - backendRefs: [{name: shop, port: 8080}]
`
	for _, c := range []string{std, exp} {
		if out, err := s.KubectlErr(c, objects, "apply", "-f", "-"); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		// Defaulted from the schema: a rule without matches matches "/".
		framework.MustContain(t, "defaulted match in "+c, s.Kubectl(c, "get", "httproute", "shop", "-o", "jsonpath={.spec.rules[0].matches[0].path}"), `"type":"PathPrefix"`, `"value":"/"`)
		// A CEL rule of the schema.
		out, err := s.KubectlErr(c, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad, namespace: default}
spec:
  parentRefs: [{name: web}]
  rules:
  - matches: [{path: {type: PathPrefix, value: "no-slash"}}]
`, "apply", "-f", "-")
		if err == nil {
			t.Fatalf("%s accepted a relative path prefix:\n%s", c, out)
		}
		framework.MustContain(t, "CEL rule in "+c, out, "must be an absolute path")
		framework.MustContain(t, "explain in "+c, s.Kubectl(c, "explain", "httproute.spec.rules.matches.path.type"), "PathPrefix")
	}
	if !strings.Contains(s.Kubectl(std, "get", "gateways", "-o", "name"), "/web") {
		t.Fatal("the Gateway is missing in the standard workspace")
	}
}

// TestMoreRealWorldCRDs installs three more public bundles, each into its
// own workspace at the same time (prometheus-operator's ten large CRDs,
// cert-manager's, Knative Serving's), waits with kubectl, explains, creates
// an object of each and checks that no bundle shows up elsewhere.
func TestMoreRealWorldCRDs(t *testing.T) {
	type bundle struct {
		module, dir, cluster, object, explain, want, plural string
	}
	bundles := []bundle{
		{module: "github.com/prometheus-operator/prometheus-operator@v0.85.0", dir: "example/prometheus-operator-crd", cluster: "root:monitoring",
			object: `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  endpoints: [{port: http, interval: 30s}]
`, explain: "servicemonitors.spec.endpoints.interval", want: "Interval at which Prometheus scrapes", plural: "servicemonitors"},
		{module: "github.com/cert-manager/cert-manager@v1.21.2", dir: "deploy/crds", cluster: "root:certs",
			object: `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned, namespace: default}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web, namespace: default}
spec:
  secretName: web-tls
  dnsNames: [web.example.com]
  issuerRef: {name: selfsigned, kind: Issuer}
`, explain: "certificates.spec.dnsNames", want: "Requested DNS subject alternative names", plural: "certificates"},
		{module: "knative.dev/serving@v0.51.0", dir: "config/core/300-resources", cluster: "root:serving",
			object: `apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: hello, namespace: default}
spec:
  template:
    spec:
      containers: [{image: example.com/hello:1}]
`, explain: "services.spec --api-version=serving.knative.dev/v1", want: "ServiceSpec", plural: "services.serving.knative.dev"},
	}
	dirs := map[string]string{}
	for _, b := range bundles {
		dirs[b.cluster] = filepath.Join(moduleDir(t, b.module), b.dir)
	}
	s := framework.StartServer(t, "")
	for _, b := range bundles {
		s.CreateWorkspaces(b.cluster)
	}
	done := make(chan string, len(bundles))
	for _, b := range bundles {
		files, _ := filepath.Glob(filepath.Join(dirs[b.cluster], "*.yaml"))
		if len(files) == 0 {
			t.Fatalf("no CRDs in %s", dirs[b.cluster])
		}
		args := []string{"apply", "--server-side"}
		for _, f := range files {
			args = append(args, "-f", f)
		}
		go func() {
			out, err := s.KubectlErr(b.cluster, "", args...)
			if err != nil {
				done <- b.cluster + ": " + err.Error() + "\n" + out
				return
			}
			done <- ""
		}()
	}
	for range bundles {
		if msg := <-done; msg != "" {
			t.Fatal(msg)
		}
	}
	for _, b := range bundles {
		s.WaitEstablished(b.cluster, "crd", "--all")
		if out, err := s.KubectlErr(b.cluster, b.object, "apply", "-f", "-"); err != nil {
			t.Fatalf("%s: creating objects: %v\n%s", b.cluster, err, out)
		}
		framework.MustContain(t, "explain in "+b.cluster, s.Kubectl(b.cluster, append([]string{"explain"}, strings.Fields(b.explain)...)...), b.want)
		for _, other := range bundles {
			if other.cluster == b.cluster {
				continue
			}
			// Knative's Service shares its kind name with core Services:
			// ask for the resource by its full name.
			out, err := s.KubectlErr(b.cluster, "", "get", other.plural)
			if err == nil || !strings.Contains(out, "the server doesn't have a resource type") {
				t.Errorf("%s's %s are visible in %s: %v\n%s", other.cluster, other.plural, b.cluster, err, out)
			}
		}
	}
	framework.MustContain(t, "the Certificate", s.Kubectl("root:certs", "get", "certificates", "-o", "name"), "certificate.cert-manager.io/web")
}
