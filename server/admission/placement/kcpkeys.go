package placement

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/admission/namespacelifecycle"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// kcpKeys is kcp's assignment data of an object, in a form fit to compare:
// its assignment labels, syncer finalizers and kcp's annotations.
func kcpKeys(o metav1.Object) string {
	var keys []string
	for k, v := range o.GetLabels() {
		if assignmentLabel(k) {
			keys = append(keys, "label "+k+"="+v)
		}
	}
	for _, f := range o.GetFinalizers() {
		if syncerFinalizer(f) {
			keys = append(keys, "finalizer "+f)
		}
	}
	for k, v := range o.GetAnnotations() {
		if kcpAnnotation(k) {
			keys = append(keys, "annotation "+k+"="+v)
		}
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// checkKCPKeys refuses a create or an update (of the object or of any of
// its subresources) by anyone but system:masters whose object, after every
// mutating admission step, carries other assignment data than kcp's: Admit
// restores kcp's, but a workspace's own mutating webhooks and policies run
// after it and could set them again. On an update kcp's data is the old
// object's; on a create it is what Admit gives a new object.
func checkKCPKeys(ctx context.Context, cluster logicalcluster.Name, a admission.Attributes) error {
	op := a.GetOperation()
	if (op != admission.Create && op != admission.Update) || (op == admission.Create && a.GetSubresource() != "") {
		return nil
	}
	if u := a.GetUserInfo(); u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return nil
	}
	var want string
	if op == admission.Update {
		old, err := meta.Accessor(a.GetOldObject())
		if err != nil {
			return nil
		}
		want = kcpKeys(old)
	} else {
		expected := &metav1.ObjectMeta{Labels: maps.Clone(obj.GetLabels()), Annotations: maps.Clone(obj.GetAnnotations()), Finalizers: slices.Clone(obj.GetFinalizers())}
		KeepAssignment(expected, nil)
		gr := a.GetResource().GroupResource()
		if a.GetNamespace() != "" && !BuiltIn(gr, a.GetName()) && isSynced(cluster, gr) {
			if ns, err := namespacelifecycle.Namespace(ctx, cluster, a.GetNamespace()); err == nil {
				AddAssignment(expected, ns)
			}
		}
		want = kcpKeys(expected)
	}
	if got := kcpKeys(obj); got != want {
		what := a.GetResource().Resource
		if a.GetSubresource() != "" {
			what += "/" + a.GetSubresource()
		}
		return admission.NewForbidden(a, fmt.Errorf("the labels %s*, finalizers %s* and annotations %s, %s, %s, %s and %s* are kcp's and cannot be set or removed "+
			"(through %s, by a patch of any kind, or by a mutating webhook or policy of the workspace): they would be [%s], kcp has [%s]",
			workload.StateLabelPrefix, workload.FinalizerPrefix, workload.AssignedTargetAnnotation, workload.NamespacePolicyAnnotation, workload.AllocationsAnnotation, workload.RolloutAnnotation, workload.StatusAnnotationPrefix,
			what, got, want))
	}
	return nil
}
