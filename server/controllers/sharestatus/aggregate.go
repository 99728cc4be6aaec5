// Package sharestatus combines the status of a Deployment that several
// SyncTargets run. Each target's syncer reports the status of its copy in
// the annotation workload.kcp.io/status-<target key> (its share and the
// placement mode with it); this controller writes their combination into
// the Deployment's status, so kubectl get, describe and rollout status in
// the workspace mean what they mean on one cluster:
//
//   - Divide: replicas, updated, ready, available and unavailable are sums;
//   - Duplicate: each is the least over the targets (the whole is as
//     available as its least available copy);
//   - observedGeneration is the Deployment's generation only once every
//     assigned target has observed it;
//   - Available is True only when every target's copy is Available (or, in
//     Divide mode, when the copies together have the Deployment's replicas
//     available: a joining cluster's share still starting does not make the
//     whole unavailable);
//     Progressing is False when any copy's is (ProgressDeadlineExceeded),
//     and says ReplicaSetUpdated while any copy still rolls out;
//   - under a progressive rollout (rollout.go) a copy held on the old spec
//     counts no updated replica and does not hold observedGeneration back,
//     and Progressing says where the rollout is, or (False,
//     ProgressDeadlineExceeded) where and why it stopped;
//   - a target whose heartbeat has stopped counts for nothing ready or
//     available: kcp marks its annotation Unreachable (honest.go), and the
//     Available condition names the target and why (reason
//     SyncTargetNotReady when the whole is not available). A Deployment on
//     one such target gets the same status written over its own.
//
// One controller for all logical clusters: one watch of Deployments across
// all of them.
package sharestatus

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

// Aggregate returns the combined status of a Deployment assigned to
// several targets, and false when it is not (one target reports status
// itself), when no target has reported yet, or, in Divide mode, when one
// has not.
func Aggregate(d *appsv1.Deployment) (appsv1.DeploymentStatus, bool) {
	keys := AssignedKeys(d)
	if len(keys) < 2 {
		return appsv1.DeploymentStatus{}, false
	}
	var shares []workload.ShareStatus
	var statuses []appsv1.DeploymentStatus
	var unreachable []string
	var onOld []bool
	rollout := rolloutOf(d)
	reported := sharesOf(d, keys)
	for _, k := range keys {
		r, ok := reported[k]
		if !ok {
			continue
		}
		s, st := r.share, r.status
		old := held(rollout, d, s)
		if old {
			// Held on the old spec by a progressive rollout: none of
			// its replicas is updated to this generation.
			st.UpdatedReplicas = 0
		}
		shares, statuses = append(shares, s), append(statuses, st)
		onOld = append(onOld, old)
		if s.Unreachable != "" {
			unreachable = append(unreachable, s.Unreachable)
		}
	}
	if len(shares) == 0 {
		return appsv1.DeploymentStatus{}, false
	}
	all := len(shares) == len(keys)
	divide := shares[0].Mode == workload.ModeDivide
	if divide && !all {
		// A sum of some shares would undercount (a cluster that just
		// joined reports before one that has run its share all along):
		// the status stays as it is until every target has reported.
		return appsv1.DeploymentStatus{}, false
	}
	out := appsv1.DeploymentStatus{}
	combine := func(get func(appsv1.DeploymentStatus) int32) int32 {
		var acc int32
		for i, st := range statuses {
			v := get(st)
			switch {
			case divide:
				acc += v
			case i == 0 || v < acc:
				acc = v
			}
		}
		if !divide && !all {
			return 0 // a target that has not reported has nothing yet
		}
		return acc
	}
	out.Replicas = combine(func(s appsv1.DeploymentStatus) int32 { return s.Replicas })
	out.UpdatedReplicas = combine(func(s appsv1.DeploymentStatus) int32 { return s.UpdatedReplicas })
	out.ReadyReplicas = combine(func(s appsv1.DeploymentStatus) int32 { return s.ReadyReplicas })
	out.AvailableReplicas = combine(func(s appsv1.DeploymentStatus) int32 { return s.AvailableReplicas })
	out.UnavailableReplicas = combine(func(s appsv1.DeploymentStatus) int32 { return s.UnavailableReplicas })
	if all {
		out.ObservedGeneration = d.Generation
		for i, st := range statuses {
			switch {
			case onOld[i]:
				// A target held by a rollout has not been given the new
				// spec on purpose: kcp has observed it.
			case rollout != nil && shares[i].Written != 0 && shares[i].Observed < d.Generation:
				// Under a rollout the copy's own report counts (its
				// observedGeneration may be the summed one filled in).
				out.ObservedGeneration = min(out.ObservedGeneration, max(shares[i].Observed, d.Generation-1))
			default:
				out.ObservedGeneration = min(out.ObservedGeneration, st.ObservedGeneration)
			}
		}
	} else {
		out.ObservedGeneration = d.Status.ObservedGeneration
	}
	// Divide: the whole is available once the copies together run the
	// Deployment's replicas available, even while a cluster that joined
	// still starts its share (a rebalancing keeps the others' shares until
	// it is available).
	wholeAvailable := divide && d.Spec.Replicas != nil && out.AvailableReplicas >= *d.Spec.Replicas
	out.Conditions = conditions(d, keys, statuses, all, wholeAvailable, unreachable, rolloutProgressing(rollout, d))
	if c, ok := overflowCondition(d, shares); ok {
		out.Conditions = append(out.Conditions, c)
	}
	return out, true
}

func conditions(d *appsv1.Deployment, keys []string, statuses []appsv1.DeploymentStatus, all, wholeAvailable bool, unreachable []string, rollout *appsv1.DeploymentCondition) []appsv1.DeploymentCondition {
	availableCount := 0
	var notProgressing *appsv1.DeploymentCondition
	rolling := !all
	for i := range statuses {
		for j := range statuses[i].Conditions {
			c := statuses[i].Conditions[j]
			switch c.Type {
			case appsv1.DeploymentAvailable:
				if c.Status == corev1.ConditionTrue {
					availableCount++
				}
			case appsv1.DeploymentProgressing:
				if c.Status == corev1.ConditionFalse && notProgressing == nil {
					notProgressing = &c
				}
				if c.Reason != "NewReplicaSetAvailable" {
					rolling = true
				}
			}
		}
	}
	available := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
		Message: fmt.Sprintf("Deployment has minimum availability on all %d clusters.", len(keys))}
	if availableCount < len(keys) && wholeAvailable {
		available.Message = fmt.Sprintf("Deployment has its %d replicas available on %d of %d clusters.", *d.Spec.Replicas, availableCount, len(keys))
	} else if availableCount < len(keys) {
		available.Status, available.Reason = corev1.ConditionFalse, "MinimumReplicasUnavailable"
		available.Message = fmt.Sprintf("Deployment has minimum availability on %d of %d clusters.", availableCount, len(keys))
		if len(unreachable) > 0 {
			available.Reason = workload.ReasonSyncTargetNotReady
		}
	}
	if len(unreachable) > 0 {
		available.Message += " Not counted: " + strings.Join(unreachable, "; ")
	}
	progressing := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
		Message: fmt.Sprintf("Deployment %q has successfully progressed on all %d clusters.", d.Name, len(keys))}
	switch {
	case notProgressing != nil:
		progressing.Status, progressing.Reason, progressing.Message = corev1.ConditionFalse, notProgressing.Reason, notProgressing.Message
	case rolling:
		progressing.Reason = "ReplicaSetUpdated"
		progressing.Message = fmt.Sprintf("Deployment %q is progressing on %d clusters.", d.Name, len(keys))
	}
	if rollout != nil {
		// A progressive rollout under way, or stopped (rollout.go).
		progressing = *rollout
	}
	// Times stay those of the previous condition while it says the same.
	for _, c := range []*appsv1.DeploymentCondition{&available, &progressing} {
		for _, prev := range d.Status.Conditions {
			if prev.Type == c.Type && prev.Status == c.Status && prev.Reason == c.Reason && prev.Message == c.Message {
				c.LastUpdateTime, c.LastTransitionTime = prev.LastUpdateTime, prev.LastTransitionTime
			}
		}
	}
	return []appsv1.DeploymentCondition{available, progressing}
}
