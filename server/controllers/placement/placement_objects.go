package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	placementadmission "github.com/kcpsql/kcp/server/admission/placement"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// The objects of the built-in synced resources (workload.SyncedResources)
// come from one watch per resource across all clusters (in process, from
// the watch cache, where the server has the storage: package localwatch),
// whose cache keeps, of the objects that can be assigned at all, only what
// assignment reads: identity, assignment labels, syncer finalizers,
// per-target status annotation keys, deletion. The objects kcp creates in
// every namespace (the CA bundle, the default service account), those of
// kube-system and kube-public and projections are not kept: with many
// workspaces they are nearly all objects, and never assigned.
//
// A namespace's objects are then read from the cache, not listed (a list
// per synced resource for every namespace was most of what a decision
// cost, docs/performance.md), and only those whose assignment differs are
// written, each with one patch. An object whose assignment differs from
// its namespace's when it is added or changed (created while its namespace
// was being assigned, admission having read the namespace before) queues
// its namespace: that replaces the look again a moment after each change.
// Negotiated resources (bound per cluster) are still listed.

// objects is the cache of one synced resource.
type objects struct {
	gvr     schema.GroupVersionResource
	indexer cache.Indexer
}

// newObjectInformers starts building one trimmed cache per built-in synced
// resource; onObject hears of the additions and changes of kept objects.
func newObjectInformers(md metadata.Interface, local *localwatch.Storages, onObject func(gvr schema.GroupVersionResource, m *metav1.PartialObjectMetadata)) ([]objects, []cache.Controller) {
	var out []objects
	var ctrls []cache.Controller
	for _, gvr := range workload.SyncedResources {
		res := md.Resource(gvr)
		var lw cache.ListerWatcher = clusterinformer.ListWatch(res.List, res.Watch)
		trim := trimObject
		if l, ok := local.ListWatch(gvr, trimmedConvert); ok {
			lw, trim = l, trimmedAlready
		}
		gr := gvr.GroupResource()
		keep := func(obj interface{}) bool {
			m, ok := obj.(*metav1.PartialObjectMetadata)
			if !ok {
				return false
			}
			if m.Namespace == "" || m.Namespace == metav1.NamespaceSystem || m.Namespace == metav1.NamespacePublic {
				return false
			}
			return !placementadmission.BuiltIn(gr, m.Name) && !placementadmission.Projected(m)
		}
		gvr := gvr
		handler := cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj interface{}) {
				if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
					onObject(gvr, m)
				}
			},
			UpdateFunc: func(_, obj interface{}) {
				if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
					onObject(gvr, m)
				}
			},
		}
		indexer, ctrl := clusterinformer.NewKeeping(lw, &metav1.PartialObjectMetadata{}, clusterinformer.ClusterIndexers, handler, trim, keep)
		out = append(out, objects{gvr: gvr, indexer: indexer})
		ctrls = append(ctrls, ctrl)
	}
	return out, ctrls
}

// trimmedAssignment is what the cache keeps of an object: its identity
// (clusterinformer.TrimmedMeta), and of its metadata only what
// reconcileAssignment reads and writes (labels of kcp's assignment and
// the projection label, syncer finalizers, per-target status annotations
// with their values cut, since only their keys are read) and deletion.
func trimmedAssignment(m metav1.Object) *metav1.PartialObjectMetadata {
	out := &metav1.PartialObjectMetadata{ObjectMeta: clusterinformer.TrimmedMetaOf(m)}
	out.DeletionTimestamp = m.GetDeletionTimestamp().DeepCopy()
	for k, v := range m.GetLabels() {
		if strings.HasPrefix(k, workload.StateLabelPrefix) || k == workload.ProjectedFromLabel {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	for _, f := range m.GetFinalizers() {
		if strings.HasPrefix(f, workload.FinalizerPrefix) {
			out.Finalizers = append(out.Finalizers, f)
		}
	}
	copied := false
	for k := range m.GetAnnotations() {
		if strings.HasPrefix(k, workload.StatusAnnotationPrefix) {
			if !copied {
				// TrimmedMeta's annotations are shared with other objects.
				a := map[string]string{}
				for k, v := range out.Annotations {
					a[k] = v
				}
				out.Annotations, copied = a, true
			}
			out.Annotations[k] = ""
		}
	}
	return out
}

// trimmedConvert is the cache's copy of an object the API server's
// storage holds (localwatch): trimmedAssignment of it, read only.
func trimmedConvert(obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	return trimmedAssignment(m), nil
}

// trimObject trims what a loopback watch delivers.
func trimObject(obj interface{}) (interface{}, error) {
	if m, err := meta.Accessor(obj); err == nil {
		return trimmedAssignment(m), nil
	}
	return obj, nil
}

// trimmedAlready passes on the objects trimmedConvert made.
func trimmedAlready(obj interface{}) (interface{}, error) { return obj, nil }

// onObject queues the namespace of an object whose assignment differs
// from what its namespace says.
func (c *Controller) onObject(_ schema.GroupVersionResource, m *metav1.PartialObjectMetadata) {
	cluster := clusterinformer.ClusterOf(m)
	obj, ok, _ := c.namespaces.GetByKey(clusterinformer.Key(cluster, "", m.Namespace))
	if !ok {
		return
	}
	ns := obj.(*corev1.Namespace)
	if !carriesAssignment(ns) && !carriesAssignment(m) {
		return
	}
	if wantsAssignment(m, ns) {
		c.queue.Add("ns:" + clusterinformer.Key(cluster, "", ns.Name))
	}
}

// wantsAssignment reports whether reconcileAssignment would change the
// (cached, trimmed) object; it does not change it.
func wantsAssignment(m *metav1.PartialObjectMetadata, ns *corev1.Namespace) bool {
	return reconcileAssignment(assignmentOf(m), ns)
}

// labelCached gives the namespace's cached objects of built-in synced
// resources the namespace's assignment, patching those that differ.
func (c *Controller) labelCached(ctx context.Context, cluster logicalcluster.Name, ns *corev1.Namespace) error {
	key := string(cluster) + "|" + ns.Name
	for _, o := range c.objects {
		objs, err := o.indexer.ByIndex(clusterinformer.ByClusterNamespace, key)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			m := obj.(*metav1.PartialObjectMetadata)
			if !wantsAssignment(m, ns) {
				continue
			}
			if err := c.patchAssignment(ctx, cluster, o.gvr, m, ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// patchAssignment writes an object's assignment (reconcileAssignment of
// what the cache has) with one strategic merge patch: the labels and
// status annotations that change, the syncer finalizers added and removed
// (each by value, so the object's other finalizers stay as they are). It
// is idempotent: a patch from a cache a change behind writes what is
// wanted all the same.
func (c *Controller) patchAssignment(ctx context.Context, cluster logicalcluster.Name, gvr schema.GroupVersionResource, m *metav1.PartialObjectMetadata, ns *corev1.Namespace) error {
	raw, err := assignmentPatch(m, ns)
	if err != nil {
		return err
	}
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	_, err = d.Resource(gvr).Namespace(m.Namespace).Patch(ctx, m.Name, types.StrategicMergePatchType, raw, metav1.PatchOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("assigning %s %s|%s/%s: %w", gvr.Resource, cluster, m.Namespace, m.Name, err)
	}
	return nil
}

// assignmentPatch is the strategic merge patch that gives an object
// (cached: m) its namespace's assignment.
func assignmentPatch(m *metav1.PartialObjectMetadata, ns *corev1.Namespace) ([]byte, error) {
	u := assignmentOf(m)
	reconcileAssignment(u, ns)
	labels := map[string]interface{}{}
	for k := range m.Labels {
		if strings.HasPrefix(k, workload.StateLabelPrefix) {
			labels[k] = nil
		}
	}
	for k, v := range u.GetLabels() {
		if strings.HasPrefix(k, workload.StateLabelPrefix) {
			labels[k] = v
		}
	}
	md := map[string]interface{}{"labels": labels}
	annotations := map[string]interface{}{}
	kept := u.GetAnnotations()
	for k := range m.Annotations {
		if _, ok := kept[k]; !ok && strings.HasPrefix(k, workload.StatusAnnotationPrefix) {
			annotations[k] = nil
		}
	}
	if len(annotations) > 0 {
		md["annotations"] = annotations
	}
	var add, remove []string
	for _, f := range u.GetFinalizers() {
		if !slices.Contains(m.Finalizers, f) {
			add = append(add, f)
		}
	}
	for _, f := range m.Finalizers {
		if !slices.Contains(u.GetFinalizers(), f) {
			remove = append(remove, f)
		}
	}
	if len(add) > 0 {
		md["finalizers"] = add
	}
	if len(remove) > 0 {
		md["$deleteFromPrimitiveList/finalizers"] = remove
	}
	return json.Marshal(map[string]interface{}{"metadata": md})
}

// assignmentOf is what reconcileAssignment reads of a cached object, as
// an object of its own (the cache's is not changed).
func assignmentOf(m *metav1.PartialObjectMetadata) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{}}
	u.SetLabels(m.Labels)
	u.SetFinalizers(m.Finalizers)
	ann := map[string]string{}
	for k, v := range m.Annotations {
		if strings.HasPrefix(k, workload.StatusAnnotationPrefix) {
			ann[k] = v
		}
	}
	u.SetAnnotations(ann)
	if m.DeletionTimestamp != nil {
		u.SetDeletionTimestamp(m.DeletionTimestamp)
	}
	return u
}
