package placementexpr

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

func syncTarget() *workload.SyncTarget {
	t := &workload.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "pc1", Labels: map[string]string{"region": "eu"}}}
	t.Status.KubernetesVersion = "v1.37.2"
	t.Status.Nodes, t.Status.ReadyNodes = 3, 2
	t.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3500m"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	t.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	t.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	return t
}

func TestEval(t *testing.T) {
	for expr, want := range map[string]bool{
		`target.labels.region == "eu" && target.readyNodes >= 1`: true,
		`target.labels.region == "us"`:                           false,
		`target.name == "pc1"`:                                   true,
		`target.allocatable.cpu >= 3.5 && target.allocatable.memory >= 8.0 * 1024.0 * 1024.0 * 1024.0`: true,
		`target.allocatable.cpu > 3`:                                      true, // int vs double
		`target.capacity.cpu == 4.0`:                                      true,
		`target.kubernetesVersion.startsWith("v1.37")`:                    true,
		`target.nodes == 3 && target.readyNodes < target.nodes`:           true,
		`target.conditions.Ready == "True"`:                               true,
		`"gpu" in target.labels`:                                          false,
		`has(target.labels.region) && target.labels.region.matches("^e")`: true,
		`target.labels.exists(k, k == "region")`:                          true,
	} {
		p, err := Compile(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		got, err := p.Eval(syncTarget())
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", expr, got, err, want)
		}
	}
}

func TestEvalError(t *testing.T) {
	p, err := Compile(`target.labels.gpu == "a100"`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Eval(syncTarget()); err == nil || got {
		t.Fatalf("missing label: %v, %v; want an error", got, err)
	} else if !strings.Contains(err.Error(), "gpu") {
		t.Fatalf("error does not name the key: %v", err)
	}
}

func TestCompileErrors(t *testing.T) {
	for expr, want := range map[string]string{
		`target.labels.region ==`:                  "does not compile",
		`target.readyNodes`:                        "must evaluate to a bool",
		`target.labels`:                            "must evaluate to a bool",
		`target.nme == "pc1"`:                      "undefined field 'nme'",
		`placement.spec.namespaceSelector == null`: "undeclared reference to 'placement'",
		`namespaces.size() > 0`:                    "undeclared reference to 'namespaces'",
		// status fields that name other tenants' objects are not input
		`size(target.conflicts) > 0`:     "undefined field 'conflicts'",
		`target.status.drain == null`:    "undefined field 'status'",
		strings.Repeat(" ", MaxLength+1): "at most 2048",
	} {
		_, err := Compile(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to contain %q", expr, err, want)
		}
	}
}

func TestCostLimit(t *testing.T) {
	// nested comprehensions over labels: estimated beyond the limit
	expr := `target.labels.all(a, target.labels.all(b, target.labels.all(c, a + b + c != "")))`
	_, err := Compile(expr)
	if err == nil || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Fatalf("%s: %v, want the cost limit", expr, err)
	}
}

func TestRuntimeCostLimit(t *testing.T) {
	// within the estimate (64 labels assumed), beyond the budget on a
	// target with far more labels than the estimate assumes
	expr := `target.labels.all(a, target.labels.all(b, a.size() + b.size() > 0))`
	p, err := Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	big := syncTarget()
	for i := 0; i < 1000; i++ {
		big.Labels[strings.Repeat("k", 10)+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = "v"
	}
	if got, err := p.Eval(big); err == nil || got || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("eval on a huge target: %v, %v; want a cost limit error", got, err)
	}
	if got, err := p.Eval(syncTarget()); err != nil || !got {
		t.Fatalf("eval on a small target: %v, %v", got, err)
	}
}
