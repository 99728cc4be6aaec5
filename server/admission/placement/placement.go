// Package placement is the admission side of Placements
// (workload.kcp.io/v1alpha1):
//
//   - creating a Placement, or pointing one at another location or
//     selector, needs the verb "use" on synctargets in its location
//     workspace, checked with the requester's identity there (ordinary RBAC
//     in that workspace decides);
//   - a Deployment, Service or Ingress in a namespace that no Placement of
//     its workspace selects is accepted and waits, as a Pod waits on a
//     cluster without nodes; Unplaced tells the storage layer, which gives
//     it a condition and the client a warning saying so;
//   - an object of a synced resource created in a namespace already
//     assigned to a SyncTarget gets that target's assignment label and
//     finalizer at once (the placement controller labels what existed
//     before the assignment).
package placement

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/admission/namespacelifecycle"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/placementexpr"
	"github.com/kcpsql/kcp/server/requester"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/Placement"

var (
	placements = workload.PlacementsResource.GroupResource()
	imports    = apiresource.ImportsResource.GroupResource()
	synced     = sets.New[schema.GroupResource]()
	workloads  = sets.New(workload.WorkloadResources...)
)

func init() {
	for _, r := range workload.SyncedResources {
		synced.Insert(r.GroupResource())
	}
}

var negotiated atomic.Pointer[func(logicalcluster.Name) []schema.GroupVersionResource]

// SetNegotiated gives the plugin the negotiated resources served in a
// cluster: objects of them are synced too.
func SetNegotiated(f func(logicalcluster.Name) []schema.GroupVersionResource) { negotiated.Store(&f) }

func isSynced(cluster logicalcluster.Name, gr schema.GroupResource) bool {
	if synced.Has(gr) {
		return true
	}
	if f := negotiated.Load(); f != nil {
		for _, r := range (*f)(cluster) {
			if r.GroupResource() == gr {
				return true
			}
		}
	}
	return false
}

// BuiltIn reports the objects kcp creates in every namespace itself (the
// CA bundle, the default service account): they are not synced, since
// every physical cluster has its own.
func BuiltIn(gr schema.GroupResource, name string) bool {
	return (gr == schema.GroupResource{Resource: "configmaps"} && name == "kube-root-ca.crt") ||
		(gr == schema.GroupResource{Resource: "serviceaccounts"} && name == "default")
}

// Plugin is the admission plugin; Start gives it its Placement cache.
type Plugin struct {
	*admission.Handler
	authz authorizer.Authorizer
	state atomic.Pointer[state]
}

type state struct {
	indexer cache.Indexer
	synced  cache.InformerSynced
	clients *clusterinformer.Clients
	// targets are the SyncTargets of every location (their pod security
	// level).
	targets       cache.Indexer
	targetsSynced cache.InformerSynced
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}

// Register adds the plugin to a plugin registry (one instance per process).
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// SetAuthorizer receives the server's (cluster-aware) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// ValidateInitialization fails when no authorizer was given.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s needs an authorizer", PluginName)
	}
	return nil
}

// Start runs the shared watch of Placements in all clusters.
func Start(ctx context.Context, loopback *rest.Config) error {
	d, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	r := d.Resource(workload.PlacementsResource)
	indexer, ctrl := clusterinformer.New(clusterinformer.ListWatch(r.List, r.Watch), &unstructured.Unstructured{}, clusterinformer.ClusterIndexers, nil)
	go ctrl.RunWithContext(ctx)
	tr := d.Resource(workload.SyncTargetsResource)
	targets, tctrl := clusterinformer.New(clusterinformer.ListWatch(tr.List, tr.Watch), &unstructured.Unstructured{}, clusterinformer.ClusterIndexers, nil)
	go tctrl.RunWithContext(ctx)
	instance.state.Store(&state{indexer: indexer, synced: ctrl.HasSynced, clients: clients, targets: targets, targetsSynced: tctrl.HasSynced})
	return nil
}

// elsewhere, when set, says why a workspace is not on this shard ("" when
// it is): in an installation of several shards, a Placement cannot use a
// location of another shard yet.
var elsewhere atomic.Pointer[func(logicalcluster.Name) string]

// SetElsewhere gives the plugin the check of workspaces on other shards.
func SetElsewhere(f func(logicalcluster.Name) string) { elsewhere.Store(&f) }

// Decode reads a Placement from its unstructured form.
func Decode(obj *unstructured.Unstructured) (*workload.Placement, error) {
	var p workload.Placement
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Selects reports whether a Placement selects a namespace with these labels.
// kube-system and kube-public (known by the name label every namespace
// carries) are never placed: every workspace has them, empty, and every
// physical cluster has its own.
func Selects(p *workload.Placement, nsLabels map[string]string) bool {
	if p.DeletionTimestamp != nil || p.Spec.NamespaceSelector == nil {
		return false
	}
	if n := nsLabels[corev1.LabelMetadataName]; n == metav1.NamespaceSystem || n == metav1.NamespacePublic {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector)
	return err == nil && sel.Matches(labels.Set(nsLabels))
}

// selecting returns the names of the Placements of cluster that select a
// namespace with these labels, from the cache and, if the cache has none
// (a Placement created a moment ago), from a direct read.
func (p *Plugin) selecting(ctx context.Context, cluster logicalcluster.Name, nsLabels map[string]string) ([]string, error) {
	st := p.state.Load()
	if st == nil {
		return nil, fmt.Errorf("placement admission is starting")
	}
	var objs []*unstructured.Unstructured
	if st.synced() {
		cached, _ := st.indexer.ByIndex(clusterinformer.ByCluster, string(cluster))
		for _, o := range cached {
			objs = append(objs, o.(*unstructured.Unstructured))
		}
	}
	names := matching(objs, nsLabels)
	if len(names) > 0 {
		return names, nil
	}
	d, err := st.clients.Dynamic(cluster)
	if err != nil {
		return nil, err
	}
	list, err := d.Resource(workload.PlacementsResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	objs = objs[:0]
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	return matching(objs, nsLabels), nil
}

// Unplaced reports whether no Placement of cluster selects the namespace
// (false when that cannot be told: a missing namespace, a plugin not
// started yet).
func Unplaced(ctx context.Context, cluster logicalcluster.Name, namespace string) bool {
	ns, err := namespacelifecycle.Namespace(ctx, cluster, namespace)
	if err != nil {
		return false
	}
	names, err := instance.selecting(ctx, cluster, ns.Labels)
	return err == nil && len(names) == 0
}

// UnplacedMessage says why a workload object in namespace waits, and what
// makes it run.
func UnplacedMessage(resource, namespace string) string {
	return fmt.Sprintf("no Placement of this workspace selects namespace %q: kcp runs %s on the physical clusters a Placement "+
		"assigns the namespace to, so this one is stored but runs nowhere until a Placement (workload.kcp.io/v1alpha1) selects "+
		"the namespace (docs/multicluster.md)", namespace, resource)
}

func matching(objs []*unstructured.Unstructured, nsLabels map[string]string) []string {
	var names []string
	for _, o := range objs {
		if pl, err := Decode(o); err == nil && Selects(pl, nsLabels) {
			names = append(names, pl.Name)
		}
	}
	sort.Strings(names)
	return names
}

var _ admission.MutationInterface = &Plugin{}
var _ admission.ValidationInterface = &Plugin{}

// Admit keeps the assignment data kcp's own: only kcp (and system:masters)
// may set or change assignment labels and syncer finalizers on namespaces
// and synced objects, and the SyncTarget annotation on namespaces; a
// tenant's values are dropped on create and restored on update. A tenant
// who could set them would run workloads on clusters it may not use. Then
// it labels a new object of a synced resource in an assigned namespace.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	gr := a.GetResource().GroupResource()
	// Every update, of the object or of any subresource (status, scale,
	// ...), in every patch dialect: the status strategies of most built-in
	// resources keep the metadata the client sent.
	if a.GetOperation() != admission.Update && (a.GetOperation() != admission.Create || a.GetSubresource() != "") {
		return nil
	}
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster.IsWildcard() {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return nil
	}
	if u := a.GetUserInfo(); u == nil || !slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		var old metav1.Object
		if a.GetOperation() == admission.Update && a.GetOldObject() != nil {
			old, _ = meta.Accessor(a.GetOldObject())
		}
		KeepAssignment(obj, old)
	}
	admitTaints(a)
	if a.GetOperation() != admission.Create || a.GetSubresource() != "" || a.GetNamespace() == "" || BuiltIn(gr, a.GetName()) || !isSynced(cluster, gr) || Projected(obj) {
		return nil
	}
	ns, err := namespacelifecycle.Namespace(ctx, cluster, a.GetNamespace())
	if err != nil {
		return nil // namespacelifecycle answers for a missing namespace
	}
	AddAssignment(obj, ns)
	warnSpread(ctx, gr, a.GetObject(), a.GetName(), ns)
	return nil
}

var namespacesResource = corev1.Resource("namespaces")

// projectedObject: the object of a request is a projection.
func projectedObject(a admission.Attributes) bool {
	obj, err := meta.Accessor(a.GetObject())
	return err == nil && Projected(obj)
}

// Projected reports whether obj is a syncer's projection of what runs on a
// physical cluster (workload.ProjectedFromLabel): it is never assigned,
// so never synced down.
func Projected(obj metav1.Object) bool {
	_, ok := obj.GetLabels()[workload.ProjectedFromLabel]
	return ok
}

// assignmentLabel and syncerFinalizer recognize kcp's assignment data.
func assignmentLabel(k string) bool { return strings.HasPrefix(k, workload.StateLabelPrefix) }
func syncerFinalizer(f string) bool { return strings.HasPrefix(f, workload.FinalizerPrefix) }

// kcpAnnotation: the assigned targets and the placement policy on a
// namespace, and the per-target status, a Service's allocations and a
// Deployment's progressive rollout on an object, are kcp's.
func kcpAnnotation(k string) bool {
	return k == workload.AssignedTargetAnnotation || k == workload.NamespacePolicyAnnotation || strings.HasPrefix(k, workload.StatusAnnotationPrefix) ||
		k == workload.AllocationsAnnotation || k == workload.RolloutAnnotation
}

// KeepAssignment makes obj's assignment labels, syncer finalizers and kcp's
// annotations (assigned targets, placement policy, per-target status) those
// of old (none when old is nil).
func KeepAssignment(obj, old metav1.Object) {
	labels := map[string]string{}
	for k, v := range obj.GetLabels() {
		if !assignmentLabel(k) {
			labels[k] = v
		}
	}
	var fins []string
	for _, f := range obj.GetFinalizers() {
		if !syncerFinalizer(f) {
			fins = append(fins, f)
		}
	}
	ann := obj.GetAnnotations()
	for k := range ann {
		if kcpAnnotation(k) {
			delete(ann, k)
		}
	}
	if old != nil {
		for k, v := range old.GetLabels() {
			if assignmentLabel(k) {
				labels[k] = v
			}
		}
		for _, f := range old.GetFinalizers() {
			if syncerFinalizer(f) {
				fins = append(fins, f)
			}
		}
		for k, v := range old.GetAnnotations() {
			if kcpAnnotation(k) {
				if ann == nil {
					ann = map[string]string{}
				}
				ann[k] = v
			}
		}
	}
	if len(labels) == 0 {
		labels = nil
	}
	obj.SetLabels(labels)
	obj.SetFinalizers(fins)
	obj.SetAnnotations(ann)
}

// AddAssignment copies a namespace's assignment labels onto an object, with
// the finalizer of each assigned target. It reports whether it changed
// anything.
func AddAssignment(obj metav1.Object, ns *corev1.Namespace) bool {
	changed := false
	for k, v := range ns.Labels {
		key, ok := strings.CutPrefix(k, workload.StateLabelPrefix)
		if !ok || v != workload.StateSync {
			continue
		}
		l := obj.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		if l[k] != v {
			l[k] = v
			obj.SetLabels(l)
			changed = true
		}
		if f := workload.FinalizerPrefix + key; !slices.Contains(obj.GetFinalizers(), f) {
			obj.SetFinalizers(append(obj.GetFinalizers(), f))
			changed = true
		}
	}
	return changed
}

// Validate checks that kcp's assignment data is still kcp's after every
// mutation (checkKCPKeys), "use" for Placements and that a workload's
// namespace is placed.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster.IsWildcard() {
		return nil
	}
	if err := checkKCPKeys(ctx, cluster, a); err != nil {
		return err
	}
	if a.GetSubresource() != "" {
		return nil
	}
	if err := p.validatePodSecurity(ctx, cluster, a); err != nil {
		return err
	}
	if err := p.validateAPIAccess(ctx, cluster, a); err != nil {
		return err
	}
	gr := a.GetResource().GroupResource()
	switch {
	case gr == placements:
		return p.validatePlacement(ctx, a)
	case gr == synctargets:
		return validateTaints(a)
	case gr == imports:
		return validateImport(a)
	case workloads.Has(gr) && projectedObject(a):
		// What runs on a physical cluster, not what to run there
		// (admission/projection decides who may write it).
		return nil
	case workloads.Has(gr) && a.GetOperation() == admission.Update:
		return checkNegotiated(cluster, gr, a)
	case workloads.Has(gr) && a.GetOperation() == admission.Create:
		// A workload in a namespace no Placement selects is accepted, like
		// a Pod on a cluster without nodes: the storage layer gives it a
		// condition and a warning (server/workloadapis), and it runs once
		// a Placement selects the namespace.
		return checkNegotiated(cluster, gr, a)
	}
	return nil
}

func (p *Plugin) validatePlacement(ctx context.Context, a admission.Attributes) error {
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	pl, err := Decode(u)
	if err != nil {
		return admission.NewForbidden(a, err)
	}
	for i, o := range pl.Spec.Overrides {
		if err := workload.CheckOverridePatch(o.Patch.Raw); err != nil {
			return admission.NewForbidden(a, fmt.Errorf("spec.overrides[%d].patch: %v", i, err))
		}
	}
	if err := ValidateGroups(&pl.Spec); err != nil {
		return admission.NewForbidden(a, err)
	}
	if pl.Spec.LocationExpression != "" {
		if _, err := placementexpr.Cached(pl.Spec.LocationExpression); err != nil {
			return admission.NewForbidden(a, fmt.Errorf("spec.locationExpression %v", err))
		}
	}
	if cluster, ok := logicalcluster.From(ctx); ok {
		if err := p.validateTolerations(ctx, a, cluster, pl); err != nil {
			return err
		}
	}
	if a.GetOperation() == admission.Update {
		if old, ok := a.GetOldObject().(*unstructured.Unstructured); ok {
			if prev, err := Decode(old); err == nil && prev.Spec.LocationWorkspace == pl.Spec.LocationWorkspace &&
				equalSelector(prev.Spec.LocationSelector, pl.Spec.LocationSelector) {
				return nil
			}
		}
	}
	loc, err := logicalcluster.Parse(pl.Spec.LocationWorkspace)
	if err != nil || loc.IsWildcard() {
		return admission.NewForbidden(a, fmt.Errorf("spec.locationWorkspace %q is not a workspace path (for example root:compute)", pl.Spec.LocationWorkspace))
	}
	if f := elsewhere.Load(); f != nil {
		if why := (*f)(loc); why != "" {
			return admission.NewForbidden(a, fmt.Errorf("spec.locationWorkspace %s: %s, and placing onto the SyncTargets of a location on another shard is not supported yet (docs/operations.md, \"Shards\"); use a location workspace on this shard", loc, why))
		}
	}
	if pl.Spec.LocationSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(pl.Spec.LocationSelector); err != nil {
			return admission.NewForbidden(a, fmt.Errorf("spec.locationSelector: %v", err))
		}
	}
	if pl.Spec.NamespaceSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(pl.Spec.NamespaceSelector); err != nil {
			return admission.NewForbidden(a, fmt.Errorf("spec.namespaceSelector: %v", err))
		}
	}
	// Checked in the location workspace for the identity the request acts
	// as and, when it impersonates, the one it proved (impersonation was
	// authorized in the Placement's workspace only).
	for _, who := range requester.Both(ctx, a.GetUserInfo()) {
		attr := authorizer.AttributesRecord{
			User: who, Verb: workload.VerbUse, APIGroup: workload.Group, APIVersion: workload.Version,
			Resource: "synctargets", ResourceRequest: true,
		}
		d, _, err := p.authz.Authorize(logicalcluster.WithCluster(ctx, loc), attr)
		if err != nil || d != authorizer.DecisionAllow {
			name := ""
			if who != nil {
				name = who.GetName()
			}
			return admission.NewForbidden(a, fmt.Errorf("%q may not use the SyncTargets of workspace %s: a Placement needs the verb %q on "+
				"synctargets.%s there (granted with RBAC in that workspace), or the workspace does not exist", name, loc, workload.VerbUse, workload.Group))
		}
	}
	return nil
}

// validateImport lets a syncer write the APIResourceImports of its own
// SyncTarget only.
func validateImport(a admission.Attributes) error {
	u := a.GetUserInfo()
	if u == nil {
		return nil
	}
	target, ok := strings.CutPrefix(u.GetName(), workload.SyncerUserPrefix)
	if !ok {
		return nil
	}
	obj, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	st, _, _ := unstructured.NestedString(obj.Object, "spec", "syncTarget")
	if st != target || !strings.HasPrefix(obj.GetName(), target+".") {
		return admission.NewForbidden(a, fmt.Errorf("the syncer of SyncTarget %s may write only its own APIResourceImports (named %s.<resource>.<group>, spec.syncTarget %s)", target, target, target))
	}
	return nil
}

func equalSelector(a, b *metav1.LabelSelector) bool {
	sa, ea := metav1.LabelSelectorAsSelector(a)
	sb, eb := metav1.LabelSelectorAsSelector(b)
	return ea == nil && eb == nil && sa.String() == sb.String()
}
