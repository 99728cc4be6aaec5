package sharestatus

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

// ReasonProgressDeadlineExceeded is the reason of the Progressing=False
// condition of a stopped rollout: the reason kubectl rollout status
// reports as an error, as for one cluster.
const ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"

// RolloutStep advances the progressive rollout (Placement spec.rollout,
// given as the namespace's policy) of a Deployment that several targets
// run, at now. It returns the state to record on the Deployment
// (workload.RolloutAnnotation; nil: none, the annotation goes) and when to
// look again (0: on the next event).
//
//   - A new generation starts a new rollout. Its groups are the targets
//     whose copy was not written from it yet (all of them for any change
//     after the first generation, none for a new Deployment), grouped by
//     rollout.Groups with the targets' labels; group 0 is released at once.
//   - The released group is available when every copy of it that is still
//     assigned was written from the new generation and has it observed,
//     all its replicas updated and available and no old replica left.
//     Available for minAvailableSeconds, the next group is released.
//   - Not available within progressDeadlineSeconds of its release, the
//     rollout stops there; only a new generation starts another.
//
// labels gives each target's labels by key (for groupByLabel).
func RolloutStep(now time.Time, d *appsv1.Deployment, pol *workload.NamespacePolicy, labels map[string]map[string]string) (*workload.RolloutState, time.Duration) {
	keys := AssignedKeys(d)
	if pol == nil || pol.Rollout == nil || pol.Mode == workload.ModeDivide || len(keys) < 2 || pol.Rollout.Validate() != nil {
		return nil, 0
	}
	spec := pol.Rollout
	shares := sharesOf(d, keys)
	st := workload.ParseRolloutState(d.Annotations)
	if st == nil || st.Generation != d.Generation {
		var pending []workload.RolloutTarget
		names := map[string]string{}
		for _, k := range keys {
			s, ok := shares[k]
			if d.Generation <= 1 || (ok && s.share.Written == d.Generation) {
				continue // nothing older runs there
			}
			name := pol.Targets[k].Name
			if name == "" {
				name = k
			}
			names[k] = name
			pending = append(pending, workload.RolloutTarget{Key: k, Name: name, Labels: labels[k]})
		}
		groups, _ := spec.Groups(pending)
		st = &workload.RolloutState{Generation: d.Generation, Groups: groups, Names: names, ReleasedAt: metav1.NewMicroTime(now)}
	} else {
		st = copyState(st)
	}
	for !st.Done() && st.Stopped == "" {
		why := groupUnavailable(st.Groups[st.Current], keys, shares, d, st.Names)
		elapsed := now.Sub(st.ReleasedAt.Time)
		if why == "" {
			if st.AvailableSince == nil {
				t := metav1.NewMicroTime(now)
				st.AvailableSince = &t
			}
			if wait := spec.MinAvailable() - now.Sub(st.AvailableSince.Time); wait > 0 {
				return st, wait
			}
			st.Current++
			st.ReleasedAt, st.AvailableSince = metav1.NewMicroTime(now), nil
			continue
		}
		st.AvailableSince = nil
		if elapsed < spec.Deadline() {
			return st, spec.Deadline() - elapsed
		}
		var held []string
		for i := st.Current + 1; i < len(st.Groups); i++ {
			held = append(held, st.GroupNames(i)...)
		}
		st.Stopped = fmt.Sprintf("progressive rollout of generation %d stopped at group %d of %d (%s): not available within %s of its release: %s",
			d.Generation, st.Current+1, len(st.Groups), strings.Join(st.GroupNames(st.Current), ", "), spec.Deadline(), why)
		if len(held) > 0 {
			st.Stopped += fmt.Sprintf("; %s keep the previous spec", strings.Join(held, ", "))
		}
	}
	return st, 0
}

type targetShare struct {
	share  workload.ShareStatus
	status appsv1.DeploymentStatus
}

func sharesOf(d *appsv1.Deployment, keys []string) map[string]targetShare {
	out := map[string]targetShare{}
	for _, k := range keys {
		raw, ok := d.Annotations[workload.StatusAnnotationPrefix+k]
		if !ok {
			continue
		}
		s, st, err := workload.DeploymentShare(raw)
		if err != nil {
			continue
		}
		out[k] = targetShare{share: s, status: st}
	}
	return out
}

// groupUnavailable says why a released group is not available yet (""
// when it is). Targets no longer assigned are not waited for.
func groupUnavailable(group, keys []string, shares map[string]targetShare, d *appsv1.Deployment, names map[string]string) string {
	var whys []string
	for _, k := range group {
		if !contains(keys, k) {
			continue
		}
		name := names[k]
		if name == "" {
			name = k
		}
		s, ok := shares[k]
		switch {
		case !ok:
			whys = append(whys, name+" has not reported")
		case s.share.Unreachable != "":
			whys = append(whys, s.share.Unreachable)
		case s.share.Written != d.Generation || s.share.Observed != d.Generation:
			whys = append(whys, name+" has not observed the new spec yet")
		case s.status.UpdatedReplicas < s.share.Share || s.status.AvailableReplicas < s.share.Share || s.status.Replicas > s.status.UpdatedReplicas:
			w := fmt.Sprintf("%s: %d of %d replicas updated, %d available, %d unavailable", name, s.status.UpdatedReplicas, s.share.Share,
				s.status.AvailableReplicas, s.status.UnavailableReplicas)
			for _, c := range s.status.Conditions {
				if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionFalse && c.Message != "" {
					w += " (" + c.Message + ")"
				}
			}
			whys = append(whys, w)
		}
	}
	return strings.Join(whys, "; ")
}

func contains(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func copyState(s *workload.RolloutState) *workload.RolloutState {
	b, _ := json.Marshal(s)
	var out workload.RolloutState
	_ = json.Unmarshal(b, &out)
	return &out
}

// rolloutOf is the rollout state of d's current generation (nil when
// none).
func rolloutOf(d *appsv1.Deployment) *workload.RolloutState {
	st := workload.ParseRolloutState(d.Annotations)
	if st == nil || st.Generation != d.Generation {
		return nil
	}
	return st
}

// held reports whether a target's copy still runs a spec older than d's
// under a rollout: none of its replicas is updated, and what it observed
// is the rollout's business, not a lag (kcp has observed the new spec and
// holds it back on purpose).
func held(st *workload.RolloutState, d *appsv1.Deployment, s workload.ShareStatus) bool {
	return st != nil && s.Written != 0 && s.Written < d.Generation
}

// rolloutProgressing is the Progressing condition while a rollout is not
// done (nil when it is done or there is none).
func rolloutProgressing(st *workload.RolloutState, d *appsv1.Deployment) *appsv1.DeploymentCondition {
	if st == nil || (st.Done() && st.Stopped == "") {
		return nil
	}
	if st.Stopped != "" {
		return &appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
			Reason: ReasonProgressDeadlineExceeded, Message: st.Stopped}
	}
	msg := fmt.Sprintf("progressive rollout of generation %d: group %d of %d (%s) released", d.Generation, st.Current+1, len(st.Groups),
		strings.Join(st.GroupNames(st.Current), ", "))
	if st.AvailableSince != nil {
		msg += fmt.Sprintf(", available since %s", st.AvailableSince.UTC().Format(time.RFC3339))
	} else {
		msg += ", waiting for it to be available"
	}
	var next []string
	for i := st.Current + 1; i < len(st.Groups); i++ {
		next = append(next, st.GroupNames(i)...)
	}
	if len(next) > 0 {
		msg += "; still on the previous spec: " + strings.Join(next, ", ")
	}
	return &appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated", Message: msg}
}

// withRolloutState returns d with st recorded in its annotation (d itself
// when that changes nothing).
func withRolloutState(d *appsv1.Deployment, st *workload.RolloutState) *appsv1.Deployment {
	raw := ""
	if st != nil {
		b, _ := json.Marshal(st)
		raw = string(b)
	}
	cur, has := d.Annotations[workload.RolloutAnnotation]
	if (st == nil && !has) || (st != nil && has && cur == raw) {
		return d
	}
	out := d.DeepCopy()
	if st == nil {
		delete(out.Annotations, workload.RolloutAnnotation)
		return out
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[workload.RolloutAnnotation] = raw
	return out
}
