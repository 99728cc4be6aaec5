package syncerview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	kjson "sigs.k8s.io/json"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Projections (workload.ProjectedResources): a syncer writes what its
// physical cluster runs for a workspace (Pods, ReplicaSets, ...) into the
// workspace through its view, with exactly these requests:
//
//   - list and watch of a projected resource whose label selector names
//     workload.kcp.io/projected-from: the selector projected-from=<its
//     key> is added (another target's projections, and tenants' objects,
//     are never listed);
//   - create, update and update of status, of a projected resource in a
//     namespace assigned to the target (label state.workload.kcp.io/<key>
//     = Sync on the namespace), the body a JSON object of at most 2 MiB;
//     the view sets the projected-from label to the target's key and
//     removes assignment labels and finalizers (a projection is never
//     assigned, so never synced down), and forwards what it marshalled;
//     an update needs the stored object to carry the target's key;
//   - delete of an object that carries the target's key (in any
//     namespace: a projection left behind when a namespace leaves the
//     target goes with its downstream object).
//
// An object of another target or of a tenant is NotFound.

// maxProjected bounds the body of a projection write (one object).
const maxProjected = 2 << 20

// projectedList returns the selector a list or watch of the syncer's own
// projections runs with, and whether the request is one (a projected
// resource, asked with a selector on the projected-from label).
func projectedList(gr schema.GroupResource, sel labels.Selector, key string) (labels.Selector, bool) {
	if !workload.IsProjectedResource(gr) {
		return nil, false
	}
	reqs, _ := sel.Requirements()
	named := false
	for _, r := range reqs {
		if r.Key() == workload.ProjectedFromLabel {
			named = true
		}
	}
	if !named {
		return nil, false
	}
	r, err := labels.NewRequirement(workload.ProjectedFromLabel, selection.Equals, []string{key})
	if err != nil {
		return nil, false
	}
	return sel.Add(*r), true
}

// projectedWrite reports whether a request is a projection write the view
// checks (checkProjected): a create, update or delete of a projected
// resource in one namespace of one cluster.
func projectedWrite(info *apirequest.RequestInfo, cluster logicalcluster.Name) bool {
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	if !workload.IsProjectedResource(gr) || cluster.IsWildcard() || info.Namespace == "" {
		return false
	}
	switch info.Verb {
	case "create":
		return info.Subresource == ""
	case "update":
		return info.Subresource == "" || info.Subresource == "status"
	case "delete":
		return info.Subresource == "" && info.Name != ""
	}
	return false
}

// checkProjected checks a projection write (see above) and replaces the
// body of a create or update with the one the view built.
func (f *Filter) checkProjected(req *http.Request, cluster logicalcluster.Name, info *apirequest.RequestInfo, key string) *apierrors.StatusError {
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	d, err := f.clients.Dynamic(cluster)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	ctx := req.Context()
	gvr := gr.WithVersion(info.APIVersion)
	if info.Verb != "create" {
		obj, err := d.Resource(gvr).Namespace(info.Namespace).Get(ctx, info.Name, metav1.GetOptions{})
		if err != nil || obj.GetLabels()[workload.ProjectedFromLabel] != key {
			// Do not tell whether another's object exists.
			return apierrors.NewNotFound(gr, info.Name)
		}
	}
	if info.Verb == "delete" {
		if req.Body != nil {
			body, err := io.ReadAll(io.LimitReader(req.Body, maxPatch+1))
			if err != nil || len(body) > maxPatch {
				return apierrors.NewRequestEntityTooLargeError("a delete's options are limited to 2 MiB")
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		return nil
	}
	ns, err := d.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, info.Namespace, metav1.GetOptions{})
	if err != nil || ns.GetLabels()[workload.StateLabelPrefix+key] != workload.StateSync {
		return apierrors.NewForbidden(gr, info.Name, fmt.Errorf("namespace %q is not assigned to this sync target: its syncer may not write projections there", info.Namespace))
	}
	ct := strings.TrimSpace(strings.Split(req.Header.Get("Content-Type"), ";")[0])
	if ct != "application/json" {
		return apierrors.NewBadRequest(fmt.Sprintf("a projected object is sent as application/json, not %q", ct))
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxProjected+1))
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if len(body) > maxProjected {
		return apierrors.NewRequestEntityTooLargeError("a projected object is limited to 2 MiB")
	}
	forward, err := projectedBody(body, key, info.Namespace)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	req.Body = io.NopCloser(bytes.NewReader(forward))
	req.ContentLength = int64(len(forward))
	req.Header.Set("Content-Type", ct)
	req.Header.Del("Content-Encoding")
	return nil
}

// projectedBody is the object a projection write forwards: the syncer's,
// with the projected-from label set to key, in namespace, without
// assignment labels, finalizers or kcp's annotations.
func projectedBody(body []byte, key, namespace string) ([]byte, error) {
	var m map[string]interface{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &m); err != nil {
		return nil, fmt.Errorf("a projected object must be a JSON object: %v", err)
	}
	if m == nil {
		return nil, fmt.Errorf("a projected object must be a JSON object")
	}
	u := &unstructured.Unstructured{Object: m}
	if raw, ok := m["metadata"]; ok {
		b, _ := json.Marshal(raw)
		var meta metav1.ObjectMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return nil, fmt.Errorf("metadata: %v", err)
		}
	}
	l := map[string]string{}
	for k, v := range u.GetLabels() {
		if !strings.HasPrefix(k, workload.StateLabelPrefix) {
			l[k] = v
		}
	}
	l[workload.ProjectedFromLabel] = key
	u.SetLabels(l)
	ann := u.GetAnnotations()
	for k := range ann {
		if k == workload.AssignedTargetAnnotation || k == workload.NamespacePolicyAnnotation || strings.HasPrefix(k, workload.StatusAnnotationPrefix) {
			delete(ann, k)
		}
	}
	if ann != nil {
		u.SetAnnotations(ann)
	}
	u.SetFinalizers(nil)
	u.SetNamespace(namespace)
	return json.Marshal(u.Object)
}
