package e2e

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
	cmd := exec.Command("go", "mod", "download", "-json", gatewayAPI)
	cmd.Dir = t.TempDir() // outside our module: no go.mod changes
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s (needs the Go module proxy): %v\n%s", gatewayAPI, err, out)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %v\n%s", gatewayAPI, err, out)
	}
	return filepath.Join(m.Dir, "config", "crd")
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
	mustNotContain(t, "x-k8s.io kinds in standard", s.Kubectl(std, "api-resources"), "xbackends")
	mustContain(t, "x-k8s.io kinds in experimental", s.Kubectl(exp, "api-resources"), "xbackends")
	mustNotContain(t, "gateway API in root", s.Kubectl("root", "api-resources"), "httproutes")

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
		mustContain(t, "defaulted match in "+c, s.Kubectl(c, "get", "httproute", "shop", "-o", "jsonpath={.spec.rules[0].matches[0].path}"), `"type":"PathPrefix"`, `"value":"/"`)
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
		mustContain(t, "CEL rule in "+c, out, "must be an absolute path")
		mustContain(t, "explain in "+c, s.Kubectl(c, "explain", "httproute.spec.rules.matches.path.type"), "PathPrefix")
	}
	if !strings.Contains(s.Kubectl(std, "get", "gateways", "-o", "name"), "/web") {
		t.Fatal("the Gateway is missing in the standard workspace")
	}
}
