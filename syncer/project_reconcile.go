package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/panics"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

var (
	replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	// sharedNames are projected by one target of a namespace several run:
	// their names are the same on every target (hashes of the template,
	// the Service's name).
	sharedNames = map[schema.GroupVersionResource]bool{
		replicaSetsGVR: true,
		{Group: "apps", Version: "v1", Resource: "controllerrevisions"}: true,
		{Version: "v1", Resource: "endpoints"}:                          true,
	}
	// ownerKinds: upstream resources a projected object's owner may be
	// (kcp's own objects, assigned to this target, in the syncer's view).
	ownerKinds = map[string]schema.GroupVersionResource{
		"apps/Deployment":  deploymentsGVR,
		"apps/StatefulSet": {Group: "apps", Version: "v1", Resource: "statefulsets"},
		"apps/DaemonSet":   {Group: "apps", Version: "v1", Resource: "daemonsets"},
		"batch/Job":        {Group: "batch", Version: "v1", Resource: "jobs"},
		"batch/CronJob":    {Group: "batch", Version: "v1", Resource: "cronjobs"},
		"/Service":         {Version: "v1", Resource: "services"},
	}
)

// reconcileSafely is reconcile, a panic reported as an error (an object
// the syncer cannot handle is retried with backoff; the rest goes on).
func (p *projector) reconcileSafely(ctx context.Context, it pitem) (after time.Duration, err error) {
	err = panics.Recover("syncer projection", func() (err error) {
		after, err = p.reconcile(ctx, it)
		return err
	})
	var pe *panics.Error
	if errors.As(err, &pe) {
		klog.ErrorS(err, "projecting an object panicked; retrying it with backoff", "item", it, "stack", string(pe.Stack))
	}
	return after, err
}

// reconcile makes the upstream projection of one downstream object what
// the object is, or removes it.
func (p *projector) reconcile(ctx context.Context, it pitem) (time.Duration, error) {
	cluster, ns, owned := p.upstreamNamespace(it.namespace)
	if !owned {
		return 0, nil
	}
	var down *unstructured.Unstructured
	if idx := p.down[it.gvr]; idx != nil {
		if o, ok, _ := idx.GetByKey(it.namespace + "/" + it.name); ok {
			down = object(o)
		}
	}
	var up *unstructured.Unstructured
	if o, ok, _ := p.own[it.gvr].GetByKey(clusterinformer.Key(cluster, ns, it.name)); ok {
		up = object(o)
	}
	c, err := p.s.upClient(cluster)
	if err != nil {
		return 0, err
	}
	r := c.Resource(it.gvr).Namespace(ns)

	// A tenant deleted a projected Pod (how users restart one): the
	// downstream Pod it was made from goes, exactly that one.
	p.mu.Lock()
	gone, tenantDeleted := p.tenantDeleted[it]
	ownDelete := p.deleting[it]
	p.mu.Unlock()
	if up != nil && up.GetDeletionTimestamp() != nil {
		if it.gvr != podsGVR || ownDelete {
			// kcp's garbage collector at work, or the syncer's own
			// deletion of its projection (made anew): never the tenant's.
			return 0, nil
		}
		gone, tenantDeleted = up.GetAnnotations()[workload.DownstreamUIDAnnotation], true
	}
	if tenantDeleted {
		if down != nil && string(down.GetUID()) == gone {
			if down.GetDeletionTimestamp() == nil {
				uid := down.GetUID()
				err := p.s.down.Resource(it.gvr).Namespace(it.namespace).Delete(ctx, it.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					return 0, err
				}
				klog.InfoS("deleted a downstream pod its workspace deleted", "cluster", cluster, "namespace", ns, "name", it.name)
			}
			if up != nil {
				// The tenant's delete waits for no kubelet in kcp.
				if err := p.deleteUp(ctx, it, r, up); err != nil {
					return 0, err
				}
			}
			return time.Second, nil // until it is gone downstream
		}
		p.mu.Lock()
		delete(p.tenantDeleted, it)
		p.mu.Unlock()
		if up != nil && up.GetDeletionTimestamp() != nil {
			return 0, p.deleteUp(ctx, it, r, up)
		}
		// A new object of the same name (a StatefulSet's Pod) is projected.
	}

	if down == nil {
		if up != nil {
			return 0, p.deleteUp(ctx, it, r, up)
		}
		return 0, nil
	}
	if sharedNames[it.gvr] {
		if pol, _ := p.s.policy(cluster, ns); pol != nil && len(pol.Targets) > 1 && p.s.key != firstKey(pol) {
			// Another target projects this name.
			if up != nil {
				return 0, p.deleteUp(ctx, it, r, up)
			}
			return 0, nil
		}
	}
	desired, retry := p.projection(it.gvr, down, cluster, ns)
	status, hasStatus, _ := unstructured.NestedMap(down.Object, "status")
	body, err := json.Marshal([]interface{}{desired.Object, status})
	if err != nil {
		return 0, err
	}
	sum := sha256.Sum256(body)
	p.mu.Lock()
	last, seen := p.written[it]
	p.mu.Unlock()
	if up != nil && seen && last.sum == sum && last.version == up.GetResourceVersion() {
		return retry, nil
	}
	var out *unstructured.Unstructured
	if up == nil {
		out, err = r.Create(ctx, desired, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			// Not this target's (its list would show it): a tenant's
			// object or another target's projection of the same name.
			klog.V(2).InfoS("not projecting: an object of the same name exists", "resource", it.gvr.Resource, "cluster", cluster, "namespace", ns, "name", it.name)
			return 0, nil
		}
	} else {
		desired.SetResourceVersion(up.GetResourceVersion())
		out, err = r.Update(ctx, desired, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsInvalid(err) && it.gvr == podsGVR {
			// A Pod's spec is immutable but for a few fields, and the
			// physical cluster bound it to a node (kcp serves no
			// binding): the projection is made anew.
			if err := p.deleteUp(ctx, it, r, up); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("the projection of pod %s|%s/%s changed where a pod may not: made anew", cluster, ns, it.name)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("projecting %s %s|%s/%s: %v", it.gvr.Resource, cluster, ns, it.name, err)
	}
	if hasStatus {
		// Create resets status (upstream strategies): status goes apart.
		if have, _, _ := unstructured.NestedMap(out.Object, "status"); !equalJSON(have, status) {
			st := runtimeDeepCopy(status).(map[string]interface{})
			projectStatus(it.gvr, st, it.namespace, ns)
			_ = unstructured.SetNestedMap(out.Object, st, "status")
			if out, err = r.UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
				return 0, fmt.Errorf("projecting the status of %s %s|%s/%s: %v", it.gvr.Resource, cluster, ns, it.name, err)
			}
		}
	}
	p.mu.Lock()
	p.written[it] = projected{sum: sum, version: out.GetResourceVersion()}
	p.mu.Unlock()
	return retry, nil
}

// deleteUp deletes this target's projection (now, without the grace a Pod
// would wait for from a kubelet kcp does not have).
func (p *projector) deleteUp(ctx context.Context, it pitem, r interface {
	Delete(context.Context, string, metav1.DeleteOptions, ...string) error
}, up *unstructured.Unstructured) error {
	p.mu.Lock()
	p.deleting[it] = true
	delete(p.written, it)
	p.mu.Unlock()
	zero := int64(0)
	uid := up.GetUID()
	err := r.Delete(ctx, it.name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func equalJSON(a, b interface{}) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// projection is the upstream object for a downstream one, without status:
// its content, in the upstream namespace, its labels without the syncer's
// plus the projected-from label, the physical cluster and downstream UID
// annotated, owner references to upstream UIDs (an owner not upstream is
// dropped; retry says when to look again).
func (p *projector) projection(gvr schema.GroupVersionResource, down *unstructured.Unstructured, cluster logicalcluster.Name, ns string) (*unstructured.Unstructured, time.Duration) {
	out := &unstructured.Unstructured{Object: map[string]interface{}{}}
	for k, v := range down.Object {
		if k != "metadata" && k != "status" {
			out.Object[k] = runtimeDeepCopy(v)
		}
	}
	out.SetName(down.GetName())
	out.SetNamespace(ns)
	labels := map[string]string{}
	for k, v := range down.GetLabels() {
		if k != TargetLabel && !strings.HasPrefix(k, workload.StateLabelPrefix) {
			labels[k] = v
		}
	}
	labels[workload.ProjectedFromLabel] = p.s.key
	out.SetLabels(labels)
	ann := map[string]string{}
	for k, v := range down.GetAnnotations() {
		if k != UpstreamClusterAnnotation && k != UpstreamNamespaceAnnotation && k != UpstreamGenerationAnnotation {
			ann[k] = v
		}
	}
	ann[workload.PhysicalClusterAnnotation] = string(p.s.location) + "/" + p.s.target
	ann[workload.DownstreamUIDAnnotation] = string(down.GetUID())
	out.SetAnnotations(ann)
	var retry time.Duration
	var refs []metav1.OwnerReference
	for _, ref := range down.GetOwnerReferences() {
		uid, resolvable := p.upstreamUID(ref.APIVersion, ref.Kind, cluster, ns, ref.Name)
		if uid == "" {
			if resolvable {
				retry = ownerRetry
			}
			continue
		}
		ref.UID = types.UID(uid)
		refs = append(refs, ref)
	}
	out.SetOwnerReferences(refs)
	switch gvr.Resource {
	case "replicasets", "controllerrevisions":
		p.templateAsWritten(out, cluster, ns)
	case "pods":
		// kcp computes no priority of its own from a class.
		unstructured.RemoveNestedField(out.Object, "spec", "priority")
	case "events":
		projectInvolved(p, out, down.GetNamespace(), cluster, ns)
	case "endpoints":
		if subsets, ok, _ := unstructured.NestedSlice(out.Object, "subsets"); ok {
			for _, s := range subsets {
				if m, ok := s.(map[string]interface{}); ok {
					for _, f := range []string{"addresses", "notReadyAddresses"} {
						if as, ok := m[f].([]interface{}); ok {
							for _, a := range as {
								if am, ok := a.(map[string]interface{}); ok {
									p.projectRef(am["targetRef"], down.GetNamespace(), cluster, ns)
								}
							}
						}
					}
				}
			}
			_ = unstructured.SetNestedSlice(out.Object, subsets, "subsets")
		}
	case "endpointslices":
		if eps, ok, _ := unstructured.NestedSlice(out.Object, "endpoints"); ok {
			for _, e := range eps {
				if m, ok := e.(map[string]interface{}); ok {
					p.projectRef(m["targetRef"], down.GetNamespace(), cluster, ns)
				}
			}
			_ = unstructured.SetNestedSlice(out.Object, eps, "endpoints")
		}
	}
	return out, retry
}

// upstreamUID is the upstream UID of an object a downstream one refers to
// by kind and name in the same namespace, and whether it is a kind that
// can be found upstream (its absence then may be temporary).
func (p *projector) upstreamUID(apiVersion, kind string, cluster logicalcluster.Name, ns, name string) (string, bool) {
	gv, _ := schema.ParseGroupVersion(apiVersion)
	key := clusterinformer.Key(cluster, ns, name)
	var idx interface {
		GetByKey(string) (interface{}, bool, error)
	}
	switch {
	case gv.Group == "apps" && kind == "ReplicaSet":
		idx = p.own[replicaSetsGVR]
	case gv.Group == "" && kind == "Pod":
		idx = p.own[podsGVR]
	default:
		gvr, ok := ownerKinds[gv.Group+"/"+kind]
		if !ok {
			return "", false
		}
		idx = p.s.upstream[gvr]
	}
	if idx == nil {
		return "", false
	}
	o, ok, _ := idx.GetByKey(key)
	if !ok {
		if kind == "ReplicaSet" {
			// In a namespace several targets run, the first one projects
			// the ReplicaSets: another target's Pods go without owner.
			if pol, _ := p.s.policy(cluster, ns); pol != nil && len(pol.Targets) > 1 && p.s.key != firstKey(pol) {
				return "", false
			}
		}
		return "", true
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return "", true
	}
	return string(m.GetUID()), true
}

// projectRef rewrites an object reference (a map) in the downstream
// namespace to the upstream one, with the upstream UID where known.
func (p *projector) projectRef(ref interface{}, dns string, cluster logicalcluster.Name, ns string) {
	m, ok := ref.(map[string]interface{})
	if !ok {
		return
	}
	if n, _ := m["namespace"].(string); n != dns {
		delete(m, "uid")
		return
	}
	m["namespace"] = ns
	kind, _ := m["kind"].(string)
	apiVersion, _ := m["apiVersion"].(string)
	name, _ := m["name"].(string)
	if uid, _ := p.upstreamUID(apiVersion, kind, cluster, ns, name); uid != "" {
		m["uid"] = uid
	} else {
		delete(m, "uid")
	}
}

// projectInvolved rewrites an Event's involvedObject (and related).
func projectInvolved(p *projector, out *unstructured.Unstructured, dns string, cluster logicalcluster.Name, ns string) {
	for _, f := range []string{"involvedObject", "related"} {
		if ref, ok := out.Object[f]; ok {
			p.projectRef(ref, dns, cluster, ns)
		}
	}
	// A message naming the downstream namespace names the user's.
	if msg, ok := out.Object["message"].(string); ok {
		out.Object["message"] = strings.ReplaceAll(msg, dns+"/", ns+"/")
	}
}

// projectStatus rewrites what a status says of the downstream namespace.
func projectStatus(gvr schema.GroupVersionResource, st map[string]interface{}, dns, ns string) {
	if gvr != podsGVR {
		return
	}
	if conds, ok := st["conditions"].([]interface{}); ok {
		for _, c := range conds {
			if m, ok := c.(map[string]interface{}); ok {
				if msg, ok := m["message"].(string); ok {
					m["message"] = strings.ReplaceAll(msg, dns+"/", ns+"/")
				}
			}
		}
	}
}
