package sharestatus

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kcpsql/kcp/schema/workload"
)

// overflowCondition is the Overflow condition of a Deployment of an
// overflow division (Placement spec.groups), from its targets' reports:
// the division as the first of them (in key order) that describes one
// reports it (every syncer computes the same division), True while
// replicas run beyond the first group. False when no report describes a
// division.
func overflowCondition(d *appsv1.Deployment, shares []workload.ShareStatus) (appsv1.DeploymentCondition, bool) {
	for _, s := range shares {
		if s.Division == "" {
			continue
		}
		c := appsv1.DeploymentCondition{Type: workload.ConditionOverflow, Status: corev1.ConditionFalse,
			Reason: workload.ReasonInPreferredGroup, Message: s.Division}
		if s.Spilled {
			c.Status, c.Reason = corev1.ConditionTrue, workload.ReasonSpilled
		}
		for _, prev := range d.Status.Conditions {
			if prev.Type == c.Type && prev.Status == c.Status && prev.Reason == c.Reason && prev.Message == c.Message {
				c.LastUpdateTime, c.LastTransitionTime = prev.LastUpdateTime, prev.LastTransitionTime
			}
		}
		return c, true
	}
	return appsv1.DeploymentCondition{}, false
}
