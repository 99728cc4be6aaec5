package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/workload"
	placementadmission "github.com/kcpsql/kcp/server/admission/placement"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// placementStatus reports the targets a Placement may use and how many
// namespaces are assigned in its workspace.
func (c *Controller) placementStatus(ctx context.Context, cluster logicalcluster.Name, plName string) error {
	obj, ok, _ := c.placements.GetByKey(clusterinformer.Key(cluster, "", plName))
	if !ok {
		return nil
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	p, err := placementadmission.Decode(u)
	if err != nil {
		return nil
	}
	var selected, untolerated, exprFailed []string
	var selectedTargets []target
	for _, t := range c.targetsOf(p) {
		if t.exprErr != nil {
			exprFailed = append(exprFailed, fmt.Sprintf("%s: %v", t.obj.Name, t.exprErr))
		}
		if !t.matches || !usable(t.obj) {
			continue
		}
		if ok, _ := workload.Schedulable(p.Spec.Tolerations, taintsOf(t.obj), string(cluster)); ok {
			selected = append(selected, t.ref())
			selectedTargets = append(selectedTargets, t)
		} else {
			untolerated = append(untolerated, t.obj.Name)
		}
	}
	assigned := 0
	nss, _ := c.namespaces.ByIndex(clusterinformer.ByCluster, string(cluster))
	for _, o := range nss {
		ns := o.(*corev1.Namespace)
		if placementadmission.Selects(p, ns.Labels) && ns.Annotations[workload.AssignedTargetAnnotation] != "" {
			assigned++
		}
	}
	cond := metav1.Condition{Type: workload.ConditionReady, Status: metav1.ConditionTrue, Reason: workload.ReasonTargetsSelected,
		Message: fmt.Sprintf("%d Ready SyncTarget(s) in %s match", len(selected), p.Spec.LocationWorkspace), ObservedGeneration: p.Generation}
	if len(selected) == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, workload.ReasonNoReadyTarget
		cond.Message = fmt.Sprintf("no Ready, schedulable SyncTarget in %s matches the locationSelector%s: new namespaces stay unassigned", p.Spec.LocationWorkspace, andExpression(p))
		if len(untolerated) > 0 {
			cond.Message = fmt.Sprintf("no Ready SyncTarget in %s that matches the locationSelector has only taints this Placement tolerates (%s have others): new namespaces stay unassigned",
				p.Spec.LocationWorkspace, strings.Join(untolerated, ", "))
		}
	}
	if len(untolerated) > 0 {
		cond.Message += fmt.Sprintf("; not tolerated: the taints of %s", strings.Join(untolerated, ", "))
	}
	if len(exprFailed) > 0 {
		cond.Message += fmt.Sprintf("; not selected, the locationExpression failed for %s", exprMessages(exprFailed))
	}
	if msg := c.unhonoredTolerations(cluster, p); msg != "" {
		cond.Message += "; " + msg
	}
	if p.DeletionTimestamp == nil {
		if err := c.bindLocation(ctx, cluster, p.Spec.LocationWorkspace); err != nil {
			return err
		}
	}
	shadowed, err := c.shadowed(ctx, cluster)
	if err != nil {
		return err
	}
	prev := p.Status
	prev.Conditions = slices.Clone(prev.Conditions)
	p.Status.SelectedTargets, p.Status.Namespaces, p.Status.ShadowedAPIs = selected, assigned, shadowed
	p.Status.Groups = groupStatus(p, selectedTargets)
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	suspended, hasSuspended := c.suspendedCondition(p, assigned)
	if hasSuspended {
		meta.SetStatusCondition(&p.Status.Conditions, suspended)
	}
	if slices.Equal(prev.SelectedTargets, selected) && prev.Namespaces == assigned && sameCondition(prev.Conditions, cond) && slices.Equal(prev.ShadowedAPIs, shadowed) &&
		equality.Semantic.DeepEqual(prev.Groups, p.Status.Groups) &&
		(!hasSuspended || sameCondition(prev.Conditions, suspended)) {
		return nil
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p.Status)
	if err != nil {
		return err
	}
	u.Object["status"] = status
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	_, err = d.Resource(workload.PlacementsResource).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// shadowed lists the negotiated APIs the cluster's own CRDs shadow.
func (c *Controller) shadowed(ctx context.Context, cluster logicalcluster.Name) ([]string, error) {
	if c.negotiated == nil {
		return nil, nil
	}
	resources := c.negotiated.Offered(cluster)
	if len(resources) == 0 {
		return nil, nil
	}
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return nil, err
	}
	crds, err := d.Resource(crdsResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	own := map[string]bool{}
	for _, crd := range crds.Items {
		own[crd.GetName()] = true
	}
	var out []string
	for _, r := range resources {
		if name := r.Resource + "." + r.Group; own[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// bindLocation makes sure the workspace binds the location's export of
// negotiated resources (apiresource.ExportName) while a Placement uses
// the location. The binding outlives the Placement: deleting it, which
// deletes the workspace's objects of those resources, is the user's
// decision (kubectl delete apibinding).
func (c *Controller) bindLocation(ctx context.Context, cluster logicalcluster.Name, location string) error {
	name := apiresource.BindingName(location)
	if c.negotiated == nil || c.negotiated.HasBinding(cluster, name) {
		return nil
	}
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	b := &apis.APIBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: apis.Group + "/" + apis.Version, Kind: "APIBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{apiresource.NegotiatedLabel: "true"}},
		Spec:       apis.APIBindingSpec{Reference: apis.ExportReference{Export: apis.ExportName{Path: location, Name: apiresource.ExportName}}},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return err
	}
	_, err = d.Resource(apis.BindingsResource).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding the negotiated APIs of %s: %v", location, err)
	}
	return nil
}

var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func sameCondition(conds []metav1.Condition, want metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, want.Type)
	return c != nil && c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message && c.ObservedGeneration == want.ObservedGeneration
}

// suspendedCondition is the Placement's Suspended condition: True while
// spec.suspend or spec.suspendTargets pause syncing (naming what), False
// once resumed; none for a Placement that was never suspended.
func (c *Controller) suspendedCondition(p *workload.Placement, assigned int) (metav1.Condition, bool) {
	cond := metav1.Condition{Type: workload.ConditionSuspended, ObservedGeneration: p.Generation}
	switch {
	case p.Spec.Suspend:
		cond.Status, cond.Reason = metav1.ConditionTrue, workload.ReasonSuspended
		cond.Message = fmt.Sprintf("syncing is paused for the %d assigned namespace(s) on every SyncTarget: nothing is created, updated or deleted "+
			"on the physical clusters, deletions wait and nothing moves until spec.suspend is cleared", assigned)
	case len(p.Spec.SuspendTargets) > 0:
		known := map[string]bool{}
		for _, t := range c.targetsOf(p) {
			known[t.obj.Name] = true
		}
		var names []string
		for _, n := range p.Spec.SuspendTargets {
			if !known[n] {
				n += fmt.Sprintf(" (no such SyncTarget in %s)", p.Spec.LocationWorkspace)
			}
			names = append(names, n)
		}
		cond.Status, cond.Reason = metav1.ConditionTrue, workload.ReasonTargetsSuspended
		cond.Message = fmt.Sprintf("syncing to SyncTarget(s) %s is paused: nothing is created, updated or deleted there for this Placement's "+
			"namespaces, deletions wait and they stay assigned there until spec.suspendTargets no longer names them", strings.Join(names, ", "))
	default:
		if meta.FindStatusCondition(p.Status.Conditions, workload.ConditionSuspended) == nil {
			return cond, false
		}
		cond.Status, cond.Reason = metav1.ConditionFalse, workload.ReasonResumed
		cond.Message = "spec.suspend and spec.suspendTargets are clear: syncing runs again and catches up with what changed meanwhile"
	}
	return cond, true
}

// unhonoredTolerations says which tolerations of a Placement name a taint
// that its location reserved for other workspaces after the Placement was
// admitted (admission refuses them before): they do not tolerate it.
func (c *Controller) unhonoredTolerations(cluster logicalcluster.Name, p *workload.Placement) string {
	var out []string
	for _, t := range c.matchingTargets(p) {
		for _, taint := range t.obj.Spec.Taints {
			if taint.MayTolerate(string(cluster)) || workload.KCPTaint(taint.Key) {
				continue
			}
			for _, tol := range p.Spec.Tolerations {
				if tol.Key != "" && tol.Matches(&taint) {
					out = append(out, fmt.Sprintf("the toleration of %s does not apply to SyncTarget %s, which reserves that taint for other workspaces", taint.Key, t.obj.Name))
					break
				}
			}
		}
	}
	return strings.Join(out, "; ")
}

// exprMessages joins the locationExpression errors of the first few
// targets (a status message stays short on a large location).
func exprMessages(failed []string) string {
	const listed = 5
	if len(failed) <= listed {
		return strings.Join(failed, "; ")
	}
	return fmt.Sprintf("%s; and %d more target(s)", strings.Join(failed[:listed], "; "), len(failed)-listed)
}

func andExpression(p *workload.Placement) string {
	out := ""
	if p.Spec.LocationExpression != "" {
		out += " and locationExpression"
	}
	if len(p.Spec.Groups) > 0 {
		out += " and the selector of one of spec.groups"
	}
	return out
}
