// Package placementexpr compiles and evaluates a Placement's
// spec.locationExpression: a CEL predicate over one SyncTarget of the
// location workspace. The only variable is `target`, built from that
// SyncTarget alone (its name, labels and reported status); nothing of other
// SyncTargets, Placements or workspaces is reachable, and no function
// reads anything outside the expression's input. Evaluation is bounded:
// admission refuses expressions whose estimated cost exceeds CostLimit,
// and every evaluation stops once its actual cost does.
package placementexpr

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kcpsql/kcp/schema/workload"
)

const (
	// MaxLength bounds spec.locationExpression (characters).
	MaxLength = 2048
	// CostLimit bounds both the estimated cost of an expression (checked
	// at admission, for the largest target the estimate assumes) and the
	// actual cost of each evaluation (cost units as CEL counts them).
	CostLimit = 100_000
	// maxLabels, maxStringLen and maxMapEntries are the sizes the cost
	// estimate assumes for a target's maps and strings; a target larger
	// than that is still bounded by CostLimit at evaluation.
	maxLabels     = 64
	maxStringLen  = 317
	maxMapEntries = 32
)

// Target is what an expression sees as `target`.
type Target struct {
	Name   string            `cel:"name"`
	Labels map[string]string `cel:"labels"`
	// Allocatable and Capacity are the physical cluster's summed node
	// resources as numbers in base units: cpu in cores (0.5 for 500m),
	// memory and storage in bytes, pods as a count.
	Allocatable       map[string]float64 `cel:"allocatable"`
	Capacity          map[string]float64 `cel:"capacity"`
	KubernetesVersion string             `cel:"kubernetesVersion"`
	Nodes             int64              `cel:"nodes"`
	ReadyNodes        int64              `cel:"readyNodes"`
	// Conditions maps each condition type to its status (True, False,
	// Unknown).
	Conditions map[string]string `cel:"conditions"`
}

// FromSyncTarget builds the expression input of a SyncTarget.
func FromSyncTarget(t *workload.SyncTarget) *Target {
	out := &Target{
		Name: t.Name, Labels: map[string]string{}, Allocatable: quantities(t.Status.Allocatable), Capacity: quantities(t.Status.Capacity),
		KubernetesVersion: t.Status.KubernetesVersion, Nodes: int64(t.Status.Nodes), ReadyNodes: int64(t.Status.ReadyNodes),
		Conditions: map[string]string{},
	}
	for k, v := range t.Labels {
		out.Labels[k] = v
	}
	for _, c := range t.Status.Conditions {
		out.Conditions[c.Type] = string(c.Status)
	}
	return out
}

func quantities[K ~string](l map[K]resource.Quantity) map[string]float64 {
	out := map[string]float64{}
	for k, q := range l {
		out[string(k)] = q.AsApproximateFloat64()
	}
	return out
}

var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(reflect.TypeOf(&Target{}), ext.ParseStructTags(true)),
		cel.Variable("target", cel.ObjectType("placementexpr.Target")),
		cel.CrossTypeNumericComparisons(true),
	)
})

// Program is a compiled expression.
type Program struct {
	prg cel.Program
}

// Compile checks an expression: it must parse, type-check against
// `target`, be boolean, and have an estimated cost within CostLimit. The
// error is CEL's own, prefixed with what failed.
func Compile(expr string) (*Program, error) {
	if len(expr) > MaxLength {
		return nil, fmt.Errorf("is %d characters long, at most %d are allowed", len(expr), MaxLength)
	}
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("does not compile: %v", iss.Err())
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("must evaluate to a bool, not %s", ast.OutputType())
	}
	est, err := e.EstimateCost(ast, estimator{})
	if err != nil {
		return nil, fmt.Errorf("cost cannot be estimated: %v", err)
	}
	if est.Max > CostLimit {
		return nil, fmt.Errorf("estimated cost %d exceeds the limit %d (simplify the expression)", est.Max, CostLimit)
	}
	prg, err := e.Program(ast, cel.CostLimit(CostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("does not compile: %v", err)
	}
	return &Program{prg: prg}, nil
}

// Eval evaluates the expression for one SyncTarget. An error (a missing
// map key, a runtime cost overrun) means the target is not selected.
func (p *Program) Eval(t *workload.SyncTarget) (bool, error) {
	out, _, err := p.prg.Eval(map[string]any{"target": FromSyncTarget(t)})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("evaluated to %v, not a bool", out)
	}
	return b, nil
}

// estimator gives the sizes of target's strings and maps to the cost
// estimate (CEL cannot know them from the expression).
type estimator struct{}

func (estimator) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	path := n.Path()
	if len(path) < 2 || path[0] != "target" {
		return nil
	}
	switch {
	case len(path) == 2 && path[1] == "labels":
		return &checker.SizeEstimate{Min: 0, Max: maxLabels}
	case len(path) == 2 && (path[1] == "allocatable" || path[1] == "capacity" || path[1] == "conditions"):
		return &checker.SizeEstimate{Min: 0, Max: maxMapEntries}
	}
	return &checker.SizeEstimate{Min: 0, Max: maxStringLen}
}

func (estimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

var (
	cacheMu sync.Mutex
	cache   = map[string]cached{}
)

type cached struct {
	prg *Program
	err error
}

// maxCached bounds the cache of compiled expressions.
const maxCached = 1024

// Cached compiles an expression once and keeps the result (the
// controller evaluates the same few expressions for every target, often).
func Cached(expr string) (*Program, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if c, ok := cache[expr]; ok {
		return c.prg, c.err
	}
	prg, err := Compile(expr)
	if len(cache) >= maxCached {
		clear(cache)
	}
	cache[expr] = cached{prg, err}
	return prg, err
}
