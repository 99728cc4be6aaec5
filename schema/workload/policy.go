package workload

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"
)

// Placement modes: how the workloads of a namespace go to the SyncTargets
// it is assigned to.
const (
	// ModeDuplicate: every assigned target runs the whole object.
	ModeDuplicate = "Duplicate"
	// ModeDivide: a Deployment's replicas are split between the targets.
	ModeDivide = "Divide"

	// WeightsStatic: the weights of spec.weights (1 where none matches).
	WeightsStatic = "Static"
	// WeightsCapacity: a target's weight is its allocatable CPU in
	// millicores, as its syncer reports it, times its static weight.
	WeightsCapacity = "Capacity"
)

// TargetWeight gives the SyncTargets its selector matches a weight.
type TargetWeight struct {
	// Selector matches SyncTarget labels; the first entry that matches a
	// target gives its weight.
	Selector map[string]string `json:"selector,omitempty"`
	Weight   int32             `json:"weight"`
}

// Override changes objects on the SyncTargets its selector matches before
// the syncer writes them there.
type Override struct {
	// Selector matches SyncTarget labels; every matching override applies,
	// in order.
	Selector map[string]string `json:"selector,omitempty"`
	// Resource limits it to one resource (<plural>.<group>, or <plural> for
	// the core group, as in "deployments.apps"); empty: every resource.
	Resource string `json:"resource,omitempty"`
	// Patch is a strategic merge patch for the built-in kinds (containers
	// merge by name) and a JSON merge patch for others.
	Patch runtime.RawExtension `json:"patch"`
}

// NamespacePolicyAnnotation, on an assigned namespace, is what each
// syncer needs to know of its Placement: the mode, every assigned target
// with its weight, the minimum share, and the overrides that apply to each
// target. kcp writes it; the syncers read it through their view.
const NamespacePolicyAnnotation = "workload.kcp.io/placement"

// StatusAnnotationPrefix + target key, on an object assigned to several
// targets, holds that target's status of its copy (JSON); kcp sums them
// into the object's status.
const StatusAnnotationPrefix = "workload.kcp.io/status-"

// NamespacePolicy is the content of NamespacePolicyAnnotation.
type NamespacePolicy struct {
	Mode string `json:"mode"`
	// Targets are the assigned targets by key.
	Targets map[string]TargetPolicy `json:"targets"`
	// MinReplicas is the least share a target gets in Divide mode (while
	// there are replicas enough).
	MinReplicas int32 `json:"minReplicas,omitempty"`
	// Previous, while a Divide namespace is being rebalanced (a target
	// joined, left or changed weight), holds the weights of the divisions
	// before, oldest first (more than one when the division changed again
	// during a rebalancing): each target runs the largest of its shares
	// under them and under Targets, so no target gives up replicas before
	// the others run their new shares. kcp drops them once every target's
	// new share is updated and available; then the shares that shrink
	// shrink.
	Previous []map[string]int64 `json:"previous,omitempty"`
	// ConflictResolution is the Placement's (empty: Refuse).
	ConflictResolution string `json:"conflictResolution,omitempty"`
	// Groups are the Placement's spec.groups names in order: Divide is
	// then an overflow division (overflow.go), and each target names its
	// group.
	Groups []string `json:"groups,omitempty"`
	// Rollout is the Placement's spec.rollout: the syncers hold a new
	// Deployment spec from their copy until kcp releases it to them.
	Rollout *RolloutSpec `json:"rollout,omitempty"`
}

// Adopts reports whether the syncers take over downstream objects that
// kcp did not create.
func (p *NamespacePolicy) Adopts() bool {
	return p != nil && p.ConflictResolution == ConflictAdopt
}

// TargetPolicy is one assigned target's part of a NamespacePolicy.
type TargetPolicy struct {
	Name      string     `json:"name"`
	Weight    int64      `json:"weight"`
	Overrides []Override `json:"overrides,omitempty"`
	// Leaving targets are being drained: their syncer leaves its copies as
	// they are (no share, no new spec) until kcp unassigns it, once the
	// other targets run the whole workload.
	Leaving bool `json:"leaving,omitempty"`
	// Suspended targets are paused (Placement spec.suspend or
	// spec.suspendTargets): their syncer creates, updates and deletes
	// nothing downstream for the namespace and removes no finalizer; it
	// only reports status. Cleared, it catches up.
	Suspended bool `json:"suspended,omitempty"`
	// Group is the target's group of an overflow division.
	Group string `json:"group,omitempty"`
	// Allocatable is the target's allocatable resources as its syncer
	// reported them, for an overflow division: what a target that has
	// not reported its capacity for a Deployment yet counts with.
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
}

// Suspended reports whether target key is paused for the namespace.
func (p *NamespacePolicy) Suspended(key string) bool {
	return p != nil && p.Targets[key].Suspended
}

// ParsePolicy reads a namespace's policy annotation; absent means one
// target and Duplicate.
func ParsePolicy(annotations map[string]string) (*NamespacePolicy, error) {
	raw, ok := annotations[NamespacePolicyAnnotation]
	if !ok {
		return nil, nil
	}
	var p NamespacePolicy
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return nil, fmt.Errorf("annotation %s: %v", NamespacePolicyAnnotation, err)
	}
	return &p, nil
}

// Share is the number of replicas of replicas that target key runs under
// the policy: all of them in Duplicate mode, its part of Divide otherwise
// (a leaving target has no part: the others divide everything), and while
// a rebalancing is under way the largest of its parts before and after.
func (p *NamespacePolicy) Share(replicas int32, key string) int32 {
	share := p.TargetShare(replicas, key)
	if p != nil && p.Mode == ModeDivide && !p.Targets[key].Leaving && !p.Overflow() {
		if _, assigned := p.Targets[key]; assigned {
			for _, weights := range p.Previous {
				share = max(share, divideFor(replicas, weights, p.MinReplicas, key))
			}
		}
	}
	return share
}

// TargetShare is target key's share once any rebalancing is over: all
// replicas in Duplicate mode, its part of the division by the weights of
// Targets in Divide mode (none for a leaving target).
func (p *NamespacePolicy) TargetShare(replicas int32, key string) int32 {
	if p == nil || p.Mode != ModeDivide {
		return replicas
	}
	return divideFor(replicas, p.Weights(), p.MinReplicas, key)
}

// Weights are the weights of the targets that are not leaving, by key:
// what each entry of Previous holds during a rebalancing.
func (p *NamespacePolicy) Weights() map[string]int64 {
	out := map[string]int64{}
	for k, t := range p.Targets {
		if !t.Leaving {
			out[k] = t.Weight
		}
	}
	return out
}

// divideFor is key's part of replicas divided by weights (keys in order).
func divideFor(replicas int32, weights map[string]int64, minimum int32, key string) int32 {
	keys := make([]string, 0, len(weights))
	for k := range weights {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ws := make([]int64, len(keys))
	for i, k := range keys {
		ws[i] = weights[k]
	}
	shares := Divide(replicas, ws, minimum)
	for i, k := range keys {
		if k == key {
			return shares[i]
		}
	}
	return 0
}

// Divide splits replicas between targets in proportion to their weights,
// deterministically: each target first gets min(minimum, what is left), in
// order, then the rest goes by weight, floors first (largest remainder
// method: leftover replicas go to the largest fractional parts, ties to
// the earlier target). Weights below zero count as zero; if every weight is
// zero they count as equal. The shares always sum to replicas (0 when
// replicas < 0 or there is no target).
func Divide(replicas int32, weights []int64, minimum int32) []int32 {
	shares := make([]int32, len(weights))
	if len(weights) == 0 || replicas <= 0 {
		return shares
	}
	w := make([]int64, len(weights))
	var total int64
	for i, x := range weights {
		if x > 0 {
			w[i] = x
			total += x
		}
	}
	if total == 0 {
		for i := range w {
			w[i] = 1
		}
		total = int64(len(w))
	}
	left := replicas
	if minimum > 0 {
		for i := range shares {
			m := min(minimum, left)
			shares[i] = m
			left -= m
		}
	}
	if left == 0 {
		return shares
	}
	// Proportional part of what is left, by exact integer arithmetic.
	type rem struct {
		i int
		r int64
	}
	rems := make([]rem, len(w))
	var given int32
	for i, x := range w {
		q := int64(left) * x / total
		shares[i] += int32(q)
		given += int32(q)
		rems[i] = rem{i, int64(left) * x % total}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; given < left; k++ {
		shares[rems[k%len(rems)].i]++
		given++
	}
	return shares
}

// ResourceName is how an Override names a resource: <plural>.<group>, or
// the plural alone for the core group.
func ResourceName(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// MatchesLabels reports whether every key=value of sel is in labels (an
// empty selector matches everything).
func MatchesLabels(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// SplitTargetRefs splits the AssignedTargetAnnotation ("loc/a,loc/b").
func SplitTargetRefs(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// ShareStatus is what a syncer reports, in the annotation
// workload.StatusAnnotationPrefix + its target key, of its copy of an
// object that several targets run: the copy's status (observedGeneration
// in kcp's terms, as for one target), its share of the replicas and the
// placement mode, which tells kcp how to combine them.
type ShareStatus struct {
	Mode   string                 `json:"mode"`
	Share  int32                  `json:"share"`
	Status map[string]interface{} `json:"status"`
	// Unreachable is set by kcp, never by a syncer, when the target's
	// heartbeat has stopped (its SyncTarget is Ready=False): why, naming
	// the target. Status is then the copy's last report, and no longer
	// counts as ready or available (DeploymentShare). The target's syncer
	// replaces the whole annotation, without it, when it reports again.
	Unreachable string `json:"unreachable,omitempty"`
	// Group and Capacity, in an overflow division, are the target's group
	// and how many replicas of the object it can hold (its own replicas
	// there counted as room): what every syncer divides by.
	Group    string `json:"group,omitempty"`
	Capacity *int32 `json:"capacity,omitempty"`
	// Division says, for people, how the overflow division went as this
	// target's syncer computed it (each group's replicas and room, which
	// group was full), and Spilled whether replicas run beyond the first
	// group that has targets. kcp shows them as the Deployment's Overflow
	// condition.
	Division string `json:"division,omitempty"`
	Spilled  bool   `json:"spilled,omitempty"`
	// Written is the upstream generation the target's copy was last
	// written from (its syncer's report): older than the Deployment's
	// while a progressive rollout holds the target on the old spec.
	Written int64 `json:"written,omitempty"`
	// Observed is Written once the physical cluster has observed the copy
	// as written (0 until then). Status.observedGeneration cannot say it
	// under a rollout: the syncer fills it in from the Deployment's summed
	// status until its copy is observed.
	Observed int64 `json:"observed,omitempty"`
}

// ConditionOverflow is the condition kcp sets on a Deployment of an
// overflow division: True (reason Spilled) while replicas run beyond the
// first group, False (InPreferredGroup) otherwise; the message is the
// division.
const (
	ConditionOverflow      = "Overflow"
	ReasonSpilled          = "Spilled"
	ReasonInPreferredGroup = "InPreferredGroup"
)

// ReasonSyncTargetNotReady is the reason of a workload's Available=False
// condition when kcp no longer counts a target's copy because the
// target's heartbeat has stopped.
const ReasonSyncTargetNotReady = "SyncTargetNotReady"

// CheckOverridePatch refuses an override that would change what the
// syncer owns on a downstream copy: its identity (apiVersion, kind,
// name, namespace), its status, and kcp's own labels and annotations
// (kcp.io/ and workload.kcp.io/ keys), by which the syncer finds and maps
// back its copies. An override may change spec and the object's other
// labels and annotations, one key at a time: metadata, labels and
// annotations must be objects (a null would delete all of them), and no
// strategic-merge directive ($patch: replace or delete, $retainKeys,
// $deleteFromPrimitiveList/..., $setElementOrder/...) may appear outside
// spec, since it could drop kcp's keys without naming them. The patch is
// decoded strictly (a key twice, in any object, is refused), so what is
// checked is what any JSON decoder applies.
func CheckOverridePatch(raw []byte) error {
	var patch map[string]json.RawMessage
	if err := strictObject(raw, &patch); err != nil {
		return fmt.Errorf("not a JSON object with each key once: %v", err)
	}
	for k, v := range patch {
		switch k {
		case "spec":
		case "metadata":
			var meta map[string]json.RawMessage
			if err := strictObject(v, &meta); err != nil {
				return fmt.Errorf("metadata: an object with each key once, not %s (%v)", short(v), err)
			}
			for mk, mv := range meta {
				if mk != "labels" && mk != "annotations" {
					return fmt.Errorf("metadata.%s: an override may change only spec, labels and annotations", mk)
				}
				var m map[string]json.RawMessage
				if err := strictObject(mv, &m); err != nil {
					return fmt.Errorf("metadata.%s: an object with each key once, not %s (%v)", mk, short(mv), err)
				}
				for key := range m {
					if KCPOwnedKey(key) {
						return fmt.Errorf("metadata.%s[%q]: kcp's own keys cannot be overridden", mk, key)
					}
					if strings.HasPrefix(key, "$") {
						return fmt.Errorf("metadata.%s[%q]: a patch directive could drop kcp's own keys; name the keys to set or remove instead", mk, key)
					}
				}
			}
		default:
			return fmt.Errorf("%s: an override may change only spec, labels and annotations", k)
		}
	}
	return nil
}

// strictObject decodes a JSON object into m: no key twice, not null.
func strictObject(raw []byte, m *map[string]json.RawMessage) error {
	strictErrs, err := kjson.UnmarshalStrict(raw, m, kjson.DisallowDuplicateFields)
	switch {
	case err != nil:
		return err
	case len(strictErrs) > 0:
		return strictErrs[0]
	case *m == nil:
		return fmt.Errorf("null")
	}
	return nil
}

func short(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

// KCPOwnedKey reports label and annotation keys kcp and its syncers own.
func KCPOwnedKey(key string) bool {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return false
	}
	return prefix == "kcp.io" || strings.HasSuffix(prefix, ".kcp.io")
}

// DeploymentShare decodes a Deployment's per-target status annotation
// (StatusAnnotationPrefix + key): the mode, the share and the copy's status.
// The status of a share kcp marked Unreachable is UnreachableStatus of the
// last report: nothing of it is ready or available.
func DeploymentShare(annotation string) (ShareStatus, appsv1.DeploymentStatus, error) {
	var s ShareStatus
	var st appsv1.DeploymentStatus
	if err := json.Unmarshal([]byte(annotation), &s); err != nil {
		return s, st, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(s.Status, &st); err != nil {
		return s, st, err
	}
	if s.Unreachable != "" {
		st = UnreachableStatus(st, max(s.Share, st.Replicas), s.Unreachable)
	}
	return s, st, nil
}

// UnreachableStatus is what kcp reports of a Deployment's copy on a target
// whose heartbeat has stopped, from the copy's last reported status: its
// replicas, updated replicas and observed generation as last reported (they
// describe what was asked of the target), none ready or available, desired
// (the copy's replicas) unavailable, and Available=False with the reason
// SyncTargetNotReady and why as the message. Progressing stays as reported.
func UnreachableStatus(last appsv1.DeploymentStatus, desired int32, why string) appsv1.DeploymentStatus {
	st := *last.DeepCopy()
	st.ReadyReplicas, st.AvailableReplicas, st.UnavailableReplicas = 0, 0, desired
	available := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse,
		Reason: ReasonSyncTargetNotReady, Message: why}
	for i := range st.Conditions {
		if st.Conditions[i].Type == appsv1.DeploymentAvailable {
			prev := st.Conditions[i]
			if prev.Status == available.Status && prev.Reason == available.Reason && prev.Message == available.Message {
				available.LastUpdateTime, available.LastTransitionTime = prev.LastUpdateTime, prev.LastTransitionTime
			}
			st.Conditions[i] = available
			return st
		}
	}
	st.Conditions = append(st.Conditions, available)
	return st
}
