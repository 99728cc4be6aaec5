package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestCompat runs `kcp compat` as a user would: a compatible update, a
// narrowing one (exit 1, with paths), its least common denominator
// (--lcd, YAML that kubectl would accept), a type conflict and bad input.
func TestCompat(t *testing.T) {
	kcp, _ := framework.Binaries(t)
	crd := func(name, fields string) string {
		return framework.WriteFile(t, name, framework.NamespacedCRDWithStatus("widgets", "Widget", fields))
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(kcp, append([]string{"compat"}, args...)...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), code
	}
	base := crd("base.yaml", "size: {type: integer}, color: {type: string}")
	wider := crd("wider.yaml", "size: {type: integer}, color: {type: string}, extra: {type: boolean}")
	narrower := crd("narrower.yaml", "size: {type: integer, maximum: 5}")
	conflict := crd("conflict.yaml", "size: {type: string}")

	if out, _, code := run(base, wider); code != 0 || !strings.Contains(out, "is compatible") {
		t.Errorf("compatible update: exit %d, %s", code, out)
	}
	if _, errOut, code := run(base, narrower); code != 1 || !strings.Contains(errOut, "spec.versions[v1].schema.spec.color: narrower: field removed") ||
		!strings.Contains(errOut, "maximum 5") {
		t.Errorf("narrowing update: exit %d, %s", code, errOut)
	}
	out, _, code := run(base, narrower, "--lcd")
	if code != 0 || !strings.Contains(out, "kind: CustomResourceDefinition") || strings.Contains(out, "color") || !strings.Contains(out, "maximum: 5") {
		t.Errorf("--lcd: exit %d\n%s", code, out)
	}
	if _, errOut, code := run(base, conflict, "--lcd"); code != 1 || !strings.Contains(errOut, `incompatible: type "integer" against "string"`) {
		t.Errorf("type conflict: exit %d, %s", code, errOut)
	}
	if _, errOut, code := run(base, framework.WriteFile(t, "junk.yaml", "kind: ConfigMap\n")); code == 0 || !strings.Contains(errOut, "want CustomResourceDefinition") {
		t.Errorf("not a CRD: exit %d, %s", code, errOut)
	}
}
