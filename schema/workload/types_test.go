package workload

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestTargetKey(t *testing.T) {
	a := TargetKey("root:compute", "pc1")
	if a != TargetKey("root:compute", "pc1") {
		t.Fatal("TargetKey is not stable")
	}
	if len(a) != 12 {
		t.Errorf("TargetKey %q: want 12 characters", a)
	}
	seen := map[string]string{}
	for _, in := range [][2]string{{"root:compute", "pc1"}, {"root:compute", "pc2"}, {"root:compute:pc1", ""}, {"root", "compute/pc1"}, {"root:other", "pc1"}} {
		k := TargetKey(in[0], in[1])
		if prev, ok := seen[k]; ok {
			t.Errorf("TargetKey(%v) = TargetKey(%v) = %s", in, prev, k)
		}
		seen[k] = in[0] + "|" + in[1]
		for _, name := range []string{StateLabel(in[0], in[1]), Finalizer(in[0], in[1])} {
			if errs := validation.IsQualifiedName(name); len(errs) > 0 {
				t.Errorf("%s is not a valid label/finalizer name: %v", name, errs)
			}
		}
	}
}

func TestAllowsPhysicalAPIFor(t *testing.T) {
	var none *WorkspaceAPISpec
	if none.AllowsPhysicalAPIFor("root:a") {
		t.Error("no spec allows")
	}
	if (&WorkspaceAPISpec{PhysicalAPIWorkspaces: []string{"root:a"}}).AllowsPhysicalAPIFor("root:a") {
		t.Error("a list without allowPhysicalAPI allows")
	}
	all := &WorkspaceAPISpec{AllowPhysicalAPI: true}
	if !all.AllowsPhysicalAPIFor("root:anything") {
		t.Error("allowPhysicalAPI alone does not allow every workspace")
	}
	some := &WorkspaceAPISpec{AllowPhysicalAPI: true, PhysicalAPIWorkspaces: []string{"root:ops", "root:infra:*"}}
	for ws, want := range map[string]bool{"root:ops": true, "root:ops:child": false, "root:infra": false, "root:infra:agents": true,
		"root:infra:agents:deep": true, "root:infrastructure": false, "root:opsx": false} {
		if got := some.AllowsPhysicalAPIFor(ws); got != want {
			t.Errorf("%s: %v, want %v", ws, got, want)
		}
	}
}
