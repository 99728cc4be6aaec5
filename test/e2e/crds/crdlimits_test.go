package crds

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// crdWithEnum is a CRD whose spec.color has n enum values and whose
// description pads the schema by pad bytes.
func crdWithEnum(plural string, n, pad int) string {
	var values []string
	for i := 0; i < n; i++ {
		values = append(values, fmt.Sprintf("v%d", i))
	}
	return framework.NamespacedCRD("limits.example.com", plural, "K"+plural, fmt.Sprintf(
		`{type: object, description: "%s", properties: {color: {type: string, enum: [%s]}}}`, strings.Repeat("p", pad), strings.Join(values, ",")))
}

// TestCRDLimits: a tenant cannot install CRDs built to cost the server its
// memory (a huge enum, or schemas adding up past the per-workspace cap); the
// refusal names the limit and the flag; another workspace is not affected by
// the first one's CRDs.
func TestCRDLimits(t *testing.T) {
	s := framework.StartServer(t, "", "--max-crd-schema-bytes-per-workspace=400000")
	s.CreateWorkspaces("root:greedy", "root:other")

	// The attack of the issue: a 100,000-value enum, refused by default.
	out, err := s.KubectlErr("root:greedy", crdWithEnum("huges", 100000, 0), "create", "-f", "-")
	if err == nil || !strings.Contains(out, "--max-crd-enum-values") || !strings.Contains(out, "100000 enum values") {
		t.Fatalf("a CRD with 100,000 enum values: want a refusal naming the limit, got err=%v:\n%.500s", err, out)
	}
	// A large enum under the cap is served, and an invalid object's error,
	// which quotes every supported value, comes back cut to a readable size.
	if out, err := s.KubectlErr("root:greedy", crdWithEnum("bigs", 9000, 0), "create", "-f", "-"); err != nil {
		t.Fatalf("a CRD with 9,000 enum values: %v\n%s", err, out)
	}
	s.WaitEstablished("root:greedy", "crd/bigs.limits.example.com")
	obj := "apiVersion: limits.example.com/v1\nkind: Kbigs\nmetadata: {name: x, namespace: default}\ncolor: " + strings.Repeat("nope", 10) + "\n"
	for i := 0; i < 6; i++ {
		obj += fmt.Sprintf("---\napiVersion: limits.example.com/v1\nkind: Kbigs\nmetadata: {name: x%d, namespace: default}\ncolor: bad%d\n", i, i)
	}
	out, err = s.KubectlErr("root:greedy", obj, "create", "-f", "-")
	if err == nil || !strings.Contains(out, "Unsupported value") {
		t.Fatalf("an object with a value outside the enum: want a validation error, got err=%v:\n%.300s", err, out)
	}
	if len(out) > 7*70<<10 {
		t.Errorf("validation errors of %d bytes for 7 objects: each should be cut to under 64 KiB", len(out))
	}
	// An ordinary enum is fine.
	if out, err := s.KubectlErr("root:greedy", crdWithEnum("smalls", 50, 0), "create", "-f", "-"); err != nil {
		t.Fatalf("a CRD with 50 enum values: %v\n%s", err, out)
	}
	// Schemas adding up past the workspace's cap: the third one is refused.
	for i, plural := range []string{"padones", "padtwos", "padthrees"} {
		out, err := s.KubectlErr("root:greedy", crdWithEnum(plural, 1, 120000), "create", "-f", "-")
		if i < 2 && err != nil {
			t.Fatalf("CRD %s: %v\n%s", plural, err, out)
		}
		if i == 2 && (err == nil || !strings.Contains(out, "--max-crd-schema-bytes-per-workspace")) {
			t.Fatalf("CRD %s past the workspace's cap: want a refusal naming the limit, got err=%v:\n%.500s", plural, err, out)
		}
	}
	// Updating a CRD that is already there counts it once, not twice.
	if out, err := s.KubectlErr("root:greedy", "", "label", "crd", "padtwos.limits.example.com", "touched=yes"); err != nil {
		t.Fatalf("updating an admitted CRD: %v\n%s", err, out)
	}
	// The cap is per workspace: another one installs the same CRDs.
	for _, plural := range []string{"padones", "padtwos"} {
		if out, err := s.KubectlErr("root:other", crdWithEnum(plural, 1, 120000), "create", "-f", "-"); err != nil {
			t.Fatalf("CRD %s in another workspace: %v\n%s", plural, err, out)
		}
	}
}
