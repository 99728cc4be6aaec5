package placement

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/admission/namespacelifecycle"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Pod security of tenant workloads: every SyncTarget names the Pod Security
// Standard its physical cluster accepts from tenants (spec.podSecurity,
// baseline by default). A Pod, or the pod template of a Deployment,
// StatefulSet, DaemonSet, Job or CronJob, created or changed in a namespace
// assigned to targets, must meet the strictest of their levels; what does
// not is refused with upstream's own reasons. The syncer also labels the
// downstream namespaces, so the physical cluster's PodSecurity admission
// enforces the same level on whatever pods are created there.

var (
	podTemplateKinds = map[schema.GroupResource]schema.GroupVersion{
		{Resource: "pods"}:                        corev1.SchemeGroupVersion,
		{Group: "apps", Resource: "deployments"}:  appsv1.SchemeGroupVersion,
		{Group: "apps", Resource: "statefulsets"}: appsv1.SchemeGroupVersion,
		{Group: "apps", Resource: "daemonsets"}:   appsv1.SchemeGroupVersion,
		{Group: "batch", Resource: "jobs"}:        batchv1.SchemeGroupVersion,
		{Group: "batch", Resource: "cronjobs"}:    batchv1.SchemeGroupVersion,
	}
	evaluatorOnce sync.Once
	evaluator     psapolicy.Evaluator
)

func podEvaluator() psapolicy.Evaluator {
	evaluatorOnce.Do(func() {
		e, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
		if err != nil {
			klog.ErrorS(err, "pod security checks")
			return
		}
		evaluator = e
	})
	return evaluator
}

// levelRank orders the levels from the most permissive.
var levelRank = map[string]int{workload.PodSecurityPrivileged: 0, workload.PodSecurityBaseline: 1, workload.PodSecurityRestricted: 2}

// namespaceLevel is the strictest level of the targets a namespace is
// assigned to, and the target that asks for it ("" when unassigned).
func (p *Plugin) namespaceLevel(ctx context.Context, refs string) (level, target string) {
	var names []string
	for _, r := range strings.Split(refs, ",") {
		if r = strings.TrimSpace(r); r != "" {
			names = append(names, r)
		}
	}
	sort.Strings(names)
	for _, ref := range names {
		l := p.targetLevel(ctx, ref)
		if target == "" || levelRank[l] > levelRank[level] {
			level, target = l, ref
		}
	}
	return level, target
}

// targetLevel reads a SyncTarget's level ("<location>/<name>"); a target
// that cannot be read counts as baseline.
func (p *Plugin) targetLevel(ctx context.Context, ref string) string {
	obj := p.target(ctx, ref)
	if obj == nil {
		return workload.PodSecurityBaseline
	}
	spec := workload.SyncTargetSpec{}
	if raw, ok, _ := unstructured.NestedString(obj.Object, "spec", "podSecurity"); ok {
		spec.PodSecurity = raw
	}
	return spec.PodSecurityLevel()
}

// target reads a SyncTarget ("<location>/<name>"), from the informer once
// it has synced; nil when it cannot be read.
func (p *Plugin) target(ctx context.Context, ref string) *unstructured.Unstructured {
	loc, name, ok := strings.Cut(ref, "/")
	cl, err := logicalcluster.Parse(loc)
	if !ok || err != nil {
		return nil
	}
	st := p.state.Load()
	if st == nil {
		return nil
	}
	if st.targets != nil && st.targetsSynced() {
		if o, exists, _ := st.targets.GetByKey(clusterinformer.Key(cl, "", name)); exists {
			return o.(*unstructured.Unstructured)
		}
	}
	d, err := st.clients.Dynamic(cl)
	if err != nil {
		return nil
	}
	obj, err := d.Resource(workload.SyncTargetsResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return obj
}

// validatePodSecurity refuses a pod or pod template that breaks the level
// of the targets its namespace is assigned to.
func (p *Plugin) validatePodSecurity(ctx context.Context, cluster logicalcluster.Name, a admission.Attributes) error {
	gv, ok := podTemplateKinds[a.GetResource().GroupResource()]
	if !ok || a.GetNamespace() == "" || (a.GetOperation() != admission.Create && a.GetOperation() != admission.Update) {
		return nil
	}
	ns, err := namespacelifecycle.Namespace(ctx, cluster, a.GetNamespace())
	if err != nil || ns.Annotations[workload.AssignedTargetAnnotation] == "" {
		return nil // unassigned: checked when it is (the syncer's namespace label enforces downstream)
	}
	level, target := p.namespaceLevel(ctx, ns.Annotations[workload.AssignedTargetAnnotation])
	if level == workload.PodSecurityPrivileged {
		return nil
	}
	meta, spec, err := podSpecOf(a.GetObject(), gv)
	if err != nil || spec == nil {
		return nil
	}
	if a.GetOperation() == admission.Update && a.GetOldObject() != nil {
		// Like upstream's PodSecurity: an update that leaves the pod as it
		// was (kcp's own labels, status, scale) is not judged again.
		if oldMeta, oldSpec, err := podSpecOf(a.GetOldObject(), gv); err == nil && oldSpec != nil &&
			apiequality.Semantic.DeepEqual(oldSpec, spec) && apiequality.Semantic.DeepEqual(oldMeta.Annotations, meta.Annotations) {
			return nil
		}
	}
	e := podEvaluator()
	if e == nil {
		return nil
	}
	lv := psaapi.LevelVersion{Level: psaapi.Level(level), Version: psaapi.LatestVersion()}
	result := psapolicy.AggregateCheckResults(e.EvaluatePod(lv, meta, spec))
	if result.Allowed {
		return nil
	}
	return admission.NewForbidden(a, fmt.Errorf("namespace %q runs on SyncTarget %s, which accepts only pods of the %q Pod Security Standard (its spec.podSecurity, "+
		"set by the location's admins): %s: %s", a.GetNamespace(), target, level, result.ForbiddenReason(), result.ForbiddenDetail()))
}

// podSpecOf converts a stored object (internal or unstructured) to its
// v1 form and returns the pod metadata and spec it runs.
func podSpecOf(obj runtime.Object, gv schema.GroupVersion) (*metav1.ObjectMeta, *corev1.PodSpec, error) {
	var versioned runtime.Object
	if u, ok := obj.(*unstructured.Unstructured); ok {
		typed, err := legacyscheme.Scheme.New(gv.WithKind(u.GetKind()))
		if err != nil {
			return nil, nil, err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
			return nil, nil, err
		}
		versioned = typed
	} else {
		v, err := legacyscheme.Scheme.ConvertToVersion(obj, gv)
		if err != nil {
			return nil, nil, err
		}
		versioned = v
	}
	switch o := versioned.(type) {
	case *corev1.Pod:
		return &o.ObjectMeta, &o.Spec, nil
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, nil
	case *appsv1.StatefulSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, nil
	case *appsv1.DaemonSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, nil
	case *batchv1.Job:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, nil
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec, nil
	}
	return nil, nil, nil
}
