package workload

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Taints and tolerations: a location's admins taint a SyncTarget
// (spec.taints), and only Placements that tolerate a taint
// (spec.tolerations) use the target as the taint's effect says, as nodes
// and pods do in Kubernetes:
//
//   - NoSchedule: no new namespace of a Placement that does not tolerate
//     it; those already there stay.
//   - PreferNoSchedule: such a Placement's new namespaces go elsewhere when
//     another target is usable.
//   - NoExecute: NoSchedule, and namespaces already there move away (the
//     graceful move a drain does: a copy stays until its replacement is
//     Available), at once when not tolerated, after tolerationSeconds when
//     the toleration has them, never when it has none.
//
// kcp taints targets itself (TaintNotReady, TaintUnschedulable,
// TaintOutOfCapacity), and a
// location can reserve a taint for some workspaces (Taint.Reserved): a
// Placement of any other workspace does not tolerate it, and admission
// refuses a toleration that names it.

// Effects of a taint.
const (
	TaintNoSchedule       = "NoSchedule"
	TaintPreferNoSchedule = "PreferNoSchedule"
	TaintNoExecute        = "NoExecute"
)

// Operators of a toleration.
const (
	TolerationEqual  = "Equal"
	TolerationExists = "Exists"
)

// Taints kcp sets and removes itself (Placement admission refuses anyone
// else's change to them).
const (
	// TaintNotReady (NoExecute) is on a SyncTarget whose Ready condition is
	// not True, added when it stopped being Ready. A Placement that does
	// not tolerate it tolerates it for the server's
	// --placement-eviction-delay; one can tolerate it longer, or for good.
	TaintNotReady = "workload.kcp.io/not-ready"
	// TaintUnschedulable (NoSchedule) is on a cordoned SyncTarget
	// (spec.unschedulable). It is reserved for nobody: cordon is the
	// location's decision, no Placement tolerates it.
	TaintUnschedulable = "workload.kcp.io/unschedulable"
	// TaintOutOfCapacity (NoSchedule) is on a SyncTarget whose
	// OutOfCapacity condition is True: pods of kcp's workloads there
	// have waited for the physical cluster's scheduler for a while
	// (syncer --out-of-capacity-after). New namespaces go elsewhere; what
	// runs there stays. A Placement may tolerate it (work that can wait).
	TaintOutOfCapacity = "workload.kcp.io/out-of-capacity"
)

// ConditionOutOfCapacity, on a SyncTarget, is True while pods of kcp's
// workloads on its physical cluster have been unschedulable for longer
// than the syncer's --out-of-capacity-after (reason PodsUnschedulable, the
// message names one and the scheduler's words), False otherwise
// (PodsScheduled). The syncer reports it with its heartbeat.
const (
	ConditionOutOfCapacity  = "OutOfCapacity"
	ReasonPodsUnschedulable = "PodsUnschedulable"
	ReasonPodsScheduled     = "PodsScheduled"
)

// ConditionEvictionRateLimited, on a SyncTarget, is True while namespaces
// that have to leave it wait for the server's --placement-eviction-rate.
const ConditionEvictionRateLimited = "EvictionRateLimited"

// KCPTaint reports whether a taint key is one that kcp manages.
func KCPTaint(key string) bool {
	return key == TaintNotReady || key == TaintUnschedulable || key == TaintOutOfCapacity
}

// Taint is a mark on a SyncTarget that keeps away the namespaces of
// Placements that do not tolerate it.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
	// TimeAdded is when the taint was added (kcp sets it; NoExecute
	// tolerationSeconds count from it).
	TimeAdded *metav1.Time `json:"timeAdded,omitempty"`
	// Reserved taints are tolerated only by Placements of the workspaces
	// in TolerableBy (none when it is empty).
	Reserved bool `json:"reserved,omitempty"`
	// TolerableBy are workspace paths ("root:ml"), or a path followed by
	// ":*" for the workspaces inside it ("root:ml:*").
	TolerableBy []string `json:"tolerableBy,omitempty"`
}

// Toleration, on a Placement, lets its namespaces use SyncTargets with
// matching taints.
type Toleration struct {
	// Key is the taint key; empty (with Exists) matches every key.
	Key string `json:"key,omitempty"`
	// Operator is Equal (the default: key and value match) or Exists
	// (any value; Value must be empty).
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	// Effect is the taint effect matched; empty matches all.
	Effect string `json:"effect,omitempty"`
	// TolerationSeconds bounds how long a NoExecute taint is tolerated,
	// from its timeAdded; nil: for good. Zero or less: not at all.
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

// Matches reports whether the toleration matches a taint (key, operator,
// value and effect; reservation aside).
func (t *Toleration) Matches(taint *Taint) bool {
	if t.Effect != "" && t.Effect != taint.Effect {
		return false
	}
	if t.Key != "" && t.Key != taint.Key {
		return false
	}
	switch t.Operator {
	case TolerationExists:
		return true
	case "", TolerationEqual:
		return t.Key != "" && t.Value == taint.Value
	}
	return false
}

// MayTolerate reports whether a Placement of workspace cluster may
// tolerate the taint.
func (t *Taint) MayTolerate(cluster string) bool {
	if t.Key == TaintUnschedulable {
		return false
	}
	return !t.Reserved || WorkspaceMatches(t.TolerableBy, cluster)
}

// WorkspaceMatches reports whether cluster is one of the patterns: a
// workspace path, or a path followed by ":*" for the workspaces inside it.
func WorkspaceMatches(patterns []string, cluster string) bool {
	for _, p := range patterns {
		if p == cluster {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, ":*"); ok && strings.HasPrefix(cluster, prefix+":") {
			return true
		}
	}
	return false
}

// Tolerating returns the first of a Placement's tolerations (the
// Placement is in workspace cluster) that tolerates the taint, nil when
// none does: a reserved taint that the workspace may not tolerate is
// tolerated by none.
func Tolerating(tols []Toleration, taint *Taint, cluster string) *Toleration {
	if !taint.MayTolerate(cluster) {
		return nil
	}
	for i := range tols {
		if tols[i].Matches(taint) {
			return &tols[i]
		}
	}
	return nil
}

// Schedulable reports whether a Placement's tolerations let a new
// namespace go to a target with these taints: every NoSchedule and
// NoExecute taint is tolerated. preferNot is true when some
// PreferNoSchedule taint is not.
func Schedulable(tols []Toleration, taints []Taint, cluster string) (ok, preferNot bool) {
	ok = true
	for i := range taints {
		if Tolerating(tols, &taints[i], cluster) != nil {
			continue
		}
		switch taints[i].Effect {
		case TaintPreferNoSchedule:
			preferNot = true
		default:
			ok = false
		}
	}
	return ok, preferNot
}

// EvictionAt is when a namespace of a Placement with these tolerations has
// to leave a target with these taints: the earliest end of a NoExecute
// taint's toleration (its timeAdded when not tolerated, plus
// tolerationSeconds when tolerated for a time). defaults give the
// tolerationSeconds a taint key has when no toleration matches it (the
// not-ready taint: the eviction delay). ok is false when no NoExecute
// taint ends its stay; taint is the one that ends it first.
func EvictionAt(tols []Toleration, taints []Taint, cluster string, defaults map[string]time.Duration) (at time.Time, taint *Taint, ok bool) {
	for i := range taints {
		tt := &taints[i]
		if tt.Effect != TaintNoExecute {
			continue
		}
		var added time.Time
		if tt.TimeAdded != nil {
			added = tt.TimeAdded.Time
		}
		var end time.Time
		if tol := Tolerating(tols, tt, cluster); tol != nil {
			if tol.TolerationSeconds == nil {
				continue
			}
			end = added.Add(time.Duration(max(*tol.TolerationSeconds, 0)) * time.Second)
		} else if d, has := defaults[tt.Key]; has {
			end = added.Add(d)
		} else {
			end = added
		}
		if !ok || end.Before(at) {
			at, taint, ok = end, tt, true
		}
	}
	return at, taint, ok
}
