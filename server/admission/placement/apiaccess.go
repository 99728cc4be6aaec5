package placement

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/admission/namespacelifecycle"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// The pods of synced workloads talk to their workspace (syncer/apiaccess.go).
// A workload may ask to keep the physical cluster's API instead
// (workload.APIAccessAnnotation on itself or its pod template) only where
// every SyncTarget its namespace runs on allows it
// (spec.workspaceAPI.allowPhysicalAPI, the location's decision); elsewhere
// the request is refused, rather than stored and ignored.

// asksForPhysicalAPI reports whether an object (or its pod template) has
// the opt-out annotation.
func asksForPhysicalAPI(obj runtime.Object, gv schema.GroupVersion) bool {
	if m, err := meta.Accessor(obj); err == nil && m.GetAnnotations()[workload.APIAccessAnnotation] == workload.APIAccessPhysical {
		return true
	}
	tmeta, _, err := podSpecOf(obj, gv)
	return err == nil && tmeta != nil && tmeta.Annotations[workload.APIAccessAnnotation] == workload.APIAccessPhysical
}

// validateAPIAccess refuses the opt-out where a target forbids it. An
// update that does not add it is not judged again (the syncer applies the
// targets' current rule anyway).
func (p *Plugin) validateAPIAccess(ctx context.Context, cluster logicalcluster.Name, a admission.Attributes) error {
	gv, ok := podTemplateKinds[a.GetResource().GroupResource()]
	if !ok || a.GetNamespace() == "" || (a.GetOperation() != admission.Create && a.GetOperation() != admission.Update) {
		return nil
	}
	if !asksForPhysicalAPI(a.GetObject(), gv) {
		return nil
	}
	if a.GetOperation() == admission.Update && a.GetOldObject() != nil && asksForPhysicalAPI(a.GetOldObject(), gv) {
		return nil
	}
	ns, err := namespacelifecycle.Namespace(ctx, cluster, a.GetNamespace())
	if err != nil || ns.Annotations[workload.AssignedTargetAnnotation] == "" {
		return nil // unassigned: the syncer decides when it runs somewhere
	}
	var refs []string
	for _, r := range strings.Split(ns.Annotations[workload.AssignedTargetAnnotation], ",") {
		if r = strings.TrimSpace(r); r != "" {
			refs = append(refs, r)
		}
	}
	sort.Strings(refs)
	for _, ref := range refs {
		obj := p.target(ctx, ref)
		var spec workload.WorkspaceAPISpec
		if obj != nil {
			if m, found, _ := unstructured.NestedMap(obj.Object, "spec", "workspaceAPI"); found {
				_ = runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec)
			}
		}
		if !spec.AllowsPhysicalAPIFor(string(cluster)) {
			why := "its spec.workspaceAPI.allowPhysicalAPI is not set"
			if spec.AllowPhysicalAPI {
				why = fmt.Sprintf("its spec.workspaceAPI.physicalAPIWorkspaces does not name %s", cluster)
			}
			return admission.NewForbidden(a, fmt.Errorf("namespace %q runs on SyncTarget %s, whose admins do not let workloads of this workspace use the physical cluster's API "+
				"(%s): remove the annotation %s=%s; the pods then talk to this workspace with their ServiceAccount's token",
				a.GetNamespace(), ref, why, workload.APIAccessAnnotation, workload.APIAccessPhysical))
		}
	}
	return nil
}
