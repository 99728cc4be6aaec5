package workload

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// RolloutSpec (Placement spec.rollout) makes a change of a placed
// Deployment's spec go to the namespace's SyncTargets group by group: kcp
// releases the new spec to one group, waits until every copy in it runs the
// new spec available for MinAvailableSeconds, then releases the next. A
// target not released yet keeps running the copy it has (its syncer
// reports its status but writes nothing new there); a target that has no
// copy gets the newest spec at once. A group that is not available within
// ProgressDeadlineSeconds stops the rollout: the Deployment's Progressing
// condition turns False (ProgressDeadlineExceeded) naming the group and
// why, and the targets not released keep the old spec until the spec
// changes again (a fix or kubectl rollout undo starts a new rollout).
// Duplicate mode only; Deployments only (docs/multicluster.md).
type RolloutSpec struct {
	// MaxConcurrency is how many targets a group holds at most: a number
	// (at least 1) or a percentage of the targets the change goes to
	// ("34%", rounded up, at least one target). Default 1.
	MaxConcurrency *intstr.IntOrString `json:"maxConcurrency,omitempty"`
	// GroupByLabel, when set, makes one group of the targets of each value
	// of this SyncTarget label, in the values' order (targets without the
	// label last); a group larger than MaxConcurrency is split.
	GroupByLabel string `json:"groupByLabel,omitempty"`
	// MinAvailableSeconds is how long every copy of a group must run the
	// new spec available before the next group is released (default 0).
	MinAvailableSeconds int32 `json:"minAvailableSeconds,omitempty"`
	// ProgressDeadlineSeconds is how long a group has, from its release,
	// to become available; past it the rollout stops (default 600).
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
}

// DefaultRolloutDeadline is ProgressDeadlineSeconds when none is given.
const DefaultRolloutDeadline = 600 * time.Second

// DeepCopy copies the spec (nil stays nil).
func (r *RolloutSpec) DeepCopy() *RolloutSpec {
	if r == nil {
		return nil
	}
	c := *r
	if r.MaxConcurrency != nil {
		v := *r.MaxConcurrency
		c.MaxConcurrency = &v
	}
	if r.ProgressDeadlineSeconds != nil {
		v := *r.ProgressDeadlineSeconds
		c.ProgressDeadlineSeconds = &v
	}
	return &c
}

// Validate refuses what admission refuses (the CRD's schema says the
// same); the controller checks again, since a policy annotation is data.
func (r *RolloutSpec) Validate() error {
	if r == nil {
		return nil
	}
	if _, err := r.GroupSize(1); err != nil {
		return err
	}
	if r.MinAvailableSeconds < 0 {
		return fmt.Errorf("rollout.minAvailableSeconds: %d, must not be negative", r.MinAvailableSeconds)
	}
	if r.ProgressDeadlineSeconds != nil && *r.ProgressDeadlineSeconds < 1 {
		return fmt.Errorf("rollout.progressDeadlineSeconds: %d, must be at least 1", *r.ProgressDeadlineSeconds)
	}
	return nil
}

// GroupSize is how many of n targets a group holds at most.
func (r *RolloutSpec) GroupSize(n int) (int, error) {
	if r == nil || r.MaxConcurrency == nil {
		return 1, nil
	}
	mc := *r.MaxConcurrency
	if mc.Type == intstr.Int {
		if mc.IntVal < 1 {
			return 0, fmt.Errorf("rollout.maxConcurrency: %d, must be at least 1", mc.IntVal)
		}
		return int(mc.IntVal), nil
	}
	digits, ok := strings.CutSuffix(mc.StrVal, "%")
	pct, err := strconv.Atoi(digits)
	if !ok || err != nil || pct < 1 || pct > 100 || digits != strconv.Itoa(pct) {
		return 0, fmt.Errorf("rollout.maxConcurrency: %q, must be a number of at least 1 or a percentage from 1%% to 100%%", mc.StrVal)
	}
	return max(1, (n*pct+99)/100), nil
}

// Deadline is ProgressDeadlineSeconds as a duration.
func (r *RolloutSpec) Deadline() time.Duration {
	if r == nil || r.ProgressDeadlineSeconds == nil {
		return DefaultRolloutDeadline
	}
	return time.Duration(*r.ProgressDeadlineSeconds) * time.Second
}

// MinAvailable is MinAvailableSeconds as a duration.
func (r *RolloutSpec) MinAvailable() time.Duration {
	if r == nil {
		return 0
	}
	return time.Duration(r.MinAvailableSeconds) * time.Second
}

// RolloutTarget is one target as the grouping sees it.
type RolloutTarget struct {
	Key, Name string
	Labels    map[string]string
}

// Groups orders targets into the rollout's groups: by the value of
// GroupByLabel when set (values in order, targets without the label
// last), each split into groups of GroupSize(len(targets)), targets by
// name within a group. Each group holds target keys.
func (r *RolloutSpec) Groups(targets []RolloutTarget) ([][]string, error) {
	size, err := r.GroupSize(len(targets))
	if err != nil {
		return nil, err
	}
	sorted := append([]RolloutTarget(nil), targets...)
	label := ""
	if r != nil {
		label = r.GroupByLabel
	}
	value := func(t RolloutTarget) (string, bool) {
		if label == "" {
			return "", true
		}
		v, ok := t.Labels[label]
		return v, ok
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		vi, oki := value(sorted[i])
		vj, okj := value(sorted[j])
		if oki != okj {
			return oki
		}
		if vi != vj {
			return vi < vj
		}
		return sorted[i].Name < sorted[j].Name
	})
	var groups [][]string
	var cur []string
	var curValue string
	var curHas bool
	for i, t := range sorted {
		v, has := value(t)
		if i > 0 && (len(cur) == size || v != curValue || has != curHas) {
			groups = append(groups, cur)
			cur = nil
		}
		cur, curValue, curHas = append(cur, t.Key), v, has
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	return groups, nil
}

// RolloutAnnotation, on a Deployment of a namespace whose Placement has a
// rollout, holds kcp's RolloutState. kcp writes it (through the status
// subresource, so the Deployment's generation does not change); the
// syncers read it to know whether their target is released.
const RolloutAnnotation = "workload.kcp.io/rollout"

// RolloutState is where a Deployment's progressive rollout stands.
type RolloutState struct {
	// Generation is the Deployment's generation being rolled out.
	Generation int64 `json:"generation"`
	// Groups are the target keys still on an older spec when the rollout
	// started, in release order.
	Groups [][]string `json:"groups"`
	// Names are the targets' names (location workspace/name) by key, for
	// messages.
	Names map[string]string `json:"names,omitempty"`
	// Current is the index of the last released group (len(Groups): all
	// done).
	Current int `json:"current"`
	// ReleasedAt is when group Current was released (microseconds: a
	// time in seconds could release the next group up to a second before
	// minAvailableSeconds have passed).
	ReleasedAt metav1.MicroTime `json:"releasedAt"`
	// AvailableSince, when set, is since when every copy of group Current
	// runs the new spec available.
	AvailableSince *metav1.MicroTime `json:"availableSince,omitempty"`
	// Stopped, when set, says why the rollout stopped (group Current was
	// not available within the deadline).
	Stopped string `json:"stopped,omitempty"`
}

// ParseRolloutState reads a Deployment's RolloutAnnotation (nil when
// absent or unreadable).
func ParseRolloutState(annotations map[string]string) *RolloutState {
	raw, ok := annotations[RolloutAnnotation]
	if !ok {
		return nil
	}
	var s RolloutState
	if err := json.Unmarshal([]byte(raw), &s); err != nil || s.Current < 0 {
		return nil // not kcp's (a stored object may come from anywhere): start again
	}
	return &s
}

// Released reports whether target key may get the spec of generation:
// the state is of that generation and key is in a released group.
func (s *RolloutState) Released(generation int64, key string) bool {
	if s == nil || s.Generation != generation {
		return false
	}
	for i, g := range s.Groups {
		if i > s.Current {
			break
		}
		for _, k := range g {
			if k == key {
				return true
			}
		}
	}
	return false
}

// Done reports whether every group is released and was available.
func (s *RolloutState) Done() bool {
	return s != nil && s.Current >= len(s.Groups)
}

// GroupNames are the names of group i's targets.
func (s *RolloutState) GroupNames(i int) []string {
	if i < 0 || i >= len(s.Groups) {
		return nil
	}
	out := make([]string, 0, len(s.Groups[i]))
	for _, k := range s.Groups[i] {
		if n := s.Names[k]; n != "" {
			out = append(out, n)
		} else {
			out = append(out, k)
		}
	}
	return out
}
