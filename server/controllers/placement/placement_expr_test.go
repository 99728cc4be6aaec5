package placement

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func exprTarget(t *testing.T, name, region string, readyNodes int) *unstructured.Unstructured {
	st := &workload.SyncTarget{TypeMeta: metav1.TypeMeta{APIVersion: "workload.kcp.io/v1alpha1", Kind: "SyncTarget"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"region": region, "env": "prod"},
			Annotations: map[string]string{logicalcluster.Annotation: "root:compute"}}}
	st.Status.ReadyNodes = readyNodes
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

// TestTargetsOfExpression: a target matches when the locationSelector and
// the locationExpression both hold; an evaluation error makes it not match
// and is kept for the status.
func TestTargetsOfExpression(t *testing.T) {
	c := &Controller{targets: cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)}
	_ = c.targets.Add(exprTarget(t, "eu1", "eu", 2))
	_ = c.targets.Add(exprTarget(t, "eu2", "eu", 0))
	_ = c.targets.Add(exprTarget(t, "us1", "us", 3))
	names := func(p *workload.Placement) (out []string) {
		for _, tg := range c.matchingTargets(p) {
			out = append(out, tg.obj.Name)
		}
		return out
	}
	p := &workload.Placement{Spec: workload.PlacementSpec{LocationWorkspace: "root:compute",
		LocationExpression: `target.labels.region == "eu" && target.readyNodes >= 1`}}
	if got := names(p); strings.Join(got, ",") != "eu1" {
		t.Errorf("expression: %v, want eu1", got)
	}
	// both must hold
	p.Spec.LocationExpression = `target.readyNodes >= 1`
	p.Spec.LocationSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"region": "us"}}
	if got := names(p); strings.Join(got, ",") != "us1" {
		t.Errorf("selector and expression: %v, want us1", got)
	}
	// an evaluation error: not selected, the error is kept
	p.Spec.LocationSelector = nil
	p.Spec.LocationExpression = `target.labels.gpu == "a100"`
	if got := names(p); len(got) != 0 {
		t.Errorf("failing expression selects %v", got)
	}
	for _, tg := range c.targetsOf(p) {
		if tg.exprErr == nil || !strings.Contains(tg.exprErr.Error(), "gpu") {
			t.Errorf("%s: exprErr %v", tg.obj.Name, tg.exprErr)
		}
	}
	// a stored expression that does not compile selects nothing
	p.Spec.LocationExpression = `target.readyNodes`
	if got := names(p); len(got) != 0 {
		t.Errorf("non-bool expression selects %v", got)
	}
}

// TestReadinessSeesExpressionInput: a change of what an expression reads
// (here readyNodes) re-evaluates the Placements of the location.
func TestReadinessSeesExpressionInput(t *testing.T) {
	if readiness(exprTarget(t, "a", "eu", 1)) == readiness(exprTarget(t, "a", "eu", 2)) {
		t.Error("readyNodes change not noticed")
	}
}

func TestExprMessages(t *testing.T) {
	var failed []string
	for i := 0; i < 8; i++ {
		failed = append(failed, "x")
	}
	if got := exprMessages(failed); !strings.HasSuffix(got, "and 3 more target(s)") {
		t.Errorf("%q", got)
	}
}
