// Package workload holds the workload.kcp.io/v1alpha1 API of the
// multi-cluster half of kcp. SyncTarget registers one physical cluster in a
// workspace; its syncer reports the cluster's health and capacity in its
// status. Served from CRDs that kcp installs in root and shares with every
// logical cluster (crds/), like tenancy.kcp.io.
package workload

import (
	"crypto/sha256"
	"embed"
	"math/big"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API.
const (
	Group   = "workload.kcp.io"
	Version = "v1alpha1"

	// ConditionReady is True while the syncer's heartbeat is fresh.
	ConditionReady = "Ready"
	// ReasonHeartbeat and ReasonHeartbeatTimeout explain ConditionReady.
	ReasonHeartbeat        = "SyncerHeartbeat"
	ReasonHeartbeatTimeout = "HeartbeatTimeout"
	ReasonNeverHeard       = "NoHeartbeatYet"

	// ConditionCaughtUp is True once the syncer, since it started, has
	// gone through everything on both sides once: copies of workloads no
	// longer assigned to it (a cluster back from the dead) are deleted.
	// A target gets new namespaces only then.
	ConditionCaughtUp = "CaughtUp"
)

// SyncTargetsResource is the resource of SyncTargets.
var SyncTargetsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "synctargets"}

// SyncTarget is one physical cluster, registered in a workspace. Its labels
// are the cluster's location attributes (region, provider, ...).
type SyncTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SyncTargetSpec   `json:"spec,omitempty"`
	Status            SyncTargetStatus `json:"status,omitempty"`
}

// SyncTargetSpec is what the infrastructure team decides.
type SyncTargetSpec struct {
	// HeartbeatTimeout overrides the server's --synctarget-heartbeat-timeout
	// for this target.
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`
	// PodSecurity is the Pod Security Standard every tenant pod on this
	// physical cluster must meet: restricted, baseline (the default) or
	// privileged. It is the location's decision: kcp refuses pods and pod
	// templates that break it in namespaces assigned to the target, and the
	// syncer labels the downstream namespaces for the physical cluster's
	// own PodSecurity admission.
	PodSecurity string `json:"podSecurity,omitempty"`
	// WorkspaceAPI says how tenant pods on this physical cluster reach
	// their workspace: the syncer gives every synced pod an in-cluster
	// configuration (host, port, CA bundle, a token of its ServiceAccount
	// in the workspace) that points at kcp instead of the physical
	// cluster (docs/multicluster.md).
	WorkspaceAPI *WorkspaceAPISpec `json:"workspaceAPI,omitempty"`
	// Unschedulable (cordoned) targets get no new namespaces; namespaces
	// already assigned stay.
	Unschedulable bool `json:"unschedulable,omitempty"`
	// Drain (kubectl kcp workload drain) moves the namespaces assigned to
	// this target to other targets of their Placements, gracefully: a
	// copy here stays until its replacement is Available elsewhere.
	Drain bool `json:"drain,omitempty"`
	// Push, when set, asks kcp to run this target's syncer itself (push
	// mode), with the physical cluster's kubeconfig from a Secret of this
	// workspace. Only servers started with --push-mode do.
	Push *PushSpec `json:"push,omitempty"`
	// Resources are more resources to sync, names of CRDs the physical
	// cluster serves (<plural>.<group>); read by the syncer at start, in
	// both modes (bin/syncer adds its --resources).
	Resources []string `json:"resources,omitempty"`
	// Taints keep away the namespaces of Placements that do not tolerate
	// them (taints.go). kcp adds and removes TaintNotReady and
	// TaintUnschedulable itself.
	Taints []Taint `json:"taints,omitempty"`
}

// WorkspaceAPISpec is the location's decision about how tenant pods reach
// the API.
type WorkspaceAPISpec struct {
	// Address is kcp's address as the physical cluster's pods reach it
	// (https://host:port); empty takes the address the syncer itself uses
	// (pull mode) or kcp's own URL (push mode).
	Address string `json:"address,omitempty"`
	// CABundle is the PEM bundle the pods verify kcp's serving
	// certificate with; empty takes the syncer's (pull mode) or kcp's own
	// CA (push mode).
	CABundle string `json:"caBundle,omitempty"`
	// AllowPhysicalAPI lets a workload opt out (the annotation
	// workload.kcp.io/api-access: physical-cluster) and keep the physical
	// cluster's own in-cluster configuration. Off by default: a tenant's
	// pods see the physical cluster's API only if the location allows it.
	AllowPhysicalAPI bool `json:"allowPhysicalAPI,omitempty"`
	// PhysicalAPIWorkspaces, when not empty, narrows AllowPhysicalAPI to
	// these workspaces: a path ("root:ops"), or a path followed by ":*"
	// for the workspaces inside it ("root:infra:*").
	PhysicalAPIWorkspaces []string `json:"physicalAPIWorkspaces,omitempty"`
}

// DeepCopy copies the spec (nil stays nil).
func (w *WorkspaceAPISpec) DeepCopy() *WorkspaceAPISpec {
	if w == nil {
		return nil
	}
	c := *w
	c.PhysicalAPIWorkspaces = append([]string(nil), w.PhysicalAPIWorkspaces...)
	return &c
}

// AllowsPhysicalAPIFor reports whether a workspace's workloads may keep the
// physical cluster's API on this target.
func (w *WorkspaceAPISpec) AllowsPhysicalAPIFor(cluster string) bool {
	if w == nil || !w.AllowPhysicalAPI {
		return false
	}
	if len(w.PhysicalAPIWorkspaces) == 0 {
		return true
	}
	return WorkspaceMatches(w.PhysicalAPIWorkspaces, cluster)
}

// APIAccessAnnotation, on a workload or its pod template, with the value
// APIAccessPhysical, asks that its pods keep the physical cluster's
// in-cluster configuration (allowed only where every target of the
// namespace has spec.workspaceAPI.allowPhysicalAPI).
const (
	APIAccessAnnotation = "workload.kcp.io/api-access"
	APIAccessPhysical   = "physical-cluster"
)

// Pod Security Standard levels of a SyncTarget.
const (
	PodSecurityRestricted = "restricted"
	PodSecurityBaseline   = "baseline"
	PodSecurityPrivileged = "privileged"
)

// PodSecurityLevel is the level a SyncTarget enforces (baseline when it
// names none).
func (s *SyncTargetSpec) PodSecurityLevel() string {
	switch s.PodSecurity {
	case PodSecurityRestricted, PodSecurityPrivileged:
		return s.PodSecurity
	}
	return PodSecurityBaseline
}

// PushSpec names the Secret (in the SyncTarget's workspace) whose key
// "kubeconfig" holds a kubeconfig for the physical cluster: inline
// credentials only (no files, no exec or auth-provider plugins).
type PushSpec struct {
	SecretNamespace string `json:"secretNamespace"`
	SecretName      string `json:"secretName"`
}

// ConditionPushSyncer reports, for a push-mode SyncTarget, whether kcp runs
// its syncer.
const ConditionPushSyncer = "PushSyncer"

// SyncTargetStatus is what the syncer reports.
type SyncTargetStatus struct {
	Conditions        []metav1.Condition  `json:"conditions,omitempty"`
	LastHeartbeatTime *metav1.Time        `json:"lastHeartbeatTime,omitempty"`
	KubernetesVersion string              `json:"kubernetesVersion,omitempty"`
	Allocatable       corev1.ResourceList `json:"allocatable,omitempty"`
	Capacity          corev1.ResourceList `json:"capacity,omitempty"`
	Nodes             int                 `json:"nodes,omitempty"`
	ReadyNodes        int                 `json:"readyNodes,omitempty"`
	// SyncedResources are the resources the syncer syncs, and whether the
	// physical cluster serves each.
	SyncedResources []ResourceState `json:"syncedResources,omitempty"`
	// Drain is, while spec.drain is set, what is still assigned to the
	// target and why (kcp's placement controller writes it).
	Drain *DrainStatus `json:"drain,omitempty"`
	// Conflicts are the objects the syncer refuses to write because
	// something not created by kcp has their place on the physical cluster
	// (Placement conflictResolution Refuse); the syncer reports them.
	Conflicts *ConflictStatus `json:"conflicts,omitempty"`
}

// ConflictStatus counts the refused objects and names some of them.
type ConflictStatus struct {
	Count int `json:"count"`
	// Objects are at most MaxConflictsListed of them.
	Objects []SyncConflict `json:"objects,omitempty"`
}

// SyncConflict is one object the syncer does not write, and why.
type SyncConflict struct {
	Workspace string `json:"workspace"`
	Namespace string `json:"namespace"`
	Resource  string `json:"resource"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
}

// MaxConflictsListed bounds ConflictStatus.Objects.
const MaxConflictsListed = 20

// ConditionDownstreamConflict is set (True) on an upstream object whose
// kind has status conditions when the syncer refuses to write it: an
// object of its name on the physical cluster was not created by kcp.
const (
	ConditionDownstreamConflict = "DownstreamConflict"
	ReasonNotCreatedByKCP       = "NotCreatedByKCP"
)

// DrainStatus says how far a drain is.
type DrainStatus struct {
	// Namespaces are the namespaces still assigned to the target.
	Namespaces int `json:"namespaces"`
	// Moving are those whose replacement is starting elsewhere (each copy
	// here stays until its replacement is Available).
	Moving int `json:"moving"`
	// Stuck are those that cannot move: their Placement selects no other
	// usable target.
	Stuck int `json:"stuck"`
	// Blocked names some of them (at most MaxDrainBlocked), with why.
	Blocked []DrainBlock `json:"blocked,omitempty"`
	// Message sums it up.
	Message string `json:"message,omitempty"`
}

// DrainBlock is one namespace still on a draining target.
type DrainBlock struct {
	Workspace string `json:"workspace"`
	Namespace string `json:"namespace"`
	Reason    string `json:"reason"`
}

// MaxDrainBlocked bounds DrainStatus.Blocked.
const MaxDrainBlocked = 20

// ResourceState is one synced resource ("deployments.apps/v1") and its
// state: Accepted when the physical cluster serves it, NotServed if not.
type ResourceState struct {
	Resource string `json:"resource"`
	State    string `json:"state"`
}

// States of a synced resource.
const (
	ResourceAccepted  = "Accepted"
	ResourceNotServed = "NotServed"
)

// CRDs are the YAML definitions kcp installs in root.
//
//go:embed crds/*.yaml
var CRDs embed.FS

// PlacementsResource is the resource of Placements.
var PlacementsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "placements"}

// Placement, in a user's workspace, runs the namespaces it selects on the
// SyncTargets of a location workspace. Creating or changing one needs the
// verb "use" on synctargets in that location workspace.
type Placement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PlacementSpec   `json:"spec,omitempty"`
	Status            PlacementStatus `json:"status,omitempty"`
}

// PlacementSpec says where the selected namespaces may run.
type PlacementSpec struct {
	// LocationWorkspace is the workspace (logical cluster path, for
	// example root:compute) whose SyncTargets this placement uses.
	LocationWorkspace string `json:"locationWorkspace"`
	// LocationSelector selects SyncTargets by their labels; empty: all.
	LocationSelector *metav1.LabelSelector `json:"locationSelector,omitempty"`
	// LocationExpression is a CEL predicate over one SyncTarget as
	// `target` (name, labels, allocatable, capacity, kubernetesVersion,
	// nodes, readyNodes, conditions); a target is used only when both
	// locationSelector and this hold (server/placementexpr).
	LocationExpression string `json:"locationExpression,omitempty"`
	// NamespaceSelector selects the namespaces of this workspace that run
	// there; empty ({}): every namespace.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// NumberOfClusters is how many SyncTargets each selected namespace
	// runs on (default 1); AllClusters: every usable target selected.
	NumberOfClusters *int32 `json:"numberOfClusters,omitempty"`
	AllClusters      bool   `json:"allClusters,omitempty"`
	// SpreadByLabel: at most one target per value of this SyncTarget
	// label (for example region); targets without it are not used.
	SpreadByLabel string `json:"spreadByLabel,omitempty"`
	// Mode is Duplicate (default: every target runs the whole object) or
	// Divide (a Deployment's replicas are split between the targets).
	Mode string `json:"mode,omitempty"`
	// Weights are static weights for Divide (first match; default 1).
	Weights []TargetWeight `json:"weights,omitempty"`
	// WeightsFrom is Static (default) or Capacity: each target's static
	// weight times its allocatable CPU in millicores.
	WeightsFrom string `json:"weightsFrom,omitempty"`
	// MinReplicasPerCluster is the least share of each target in Divide
	// mode, while there are replicas enough.
	MinReplicasPerCluster int32 `json:"minReplicasPerCluster,omitempty"`
	// Overrides change objects for the targets they select before the
	// syncer writes them there.
	Overrides []Override `json:"overrides,omitempty"`

	// Suspend pauses syncing every namespace this Placement selects, on
	// every target (incident handling): the syncers create, update and
	// delete nothing downstream for them (the copies there run on as they
	// are), upstream deletions wait (their finalizers stay), status keeps
	// being reported, and the assignment is frozen (no failover, drain or
	// rebalancing moves them). Clearing it catches up.
	Suspend bool `json:"suspend,omitempty"`
	// SuspendTargets pauses syncing this Placement's namespaces to the
	// named SyncTargets of the location workspace only, with the same
	// meaning as Suspend; the namespaces stay assigned to them (never
	// evicted or drained away while suspended).
	SuspendTargets []string `json:"suspendTargets,omitempty"`

	// ConflictResolution says what a syncer does with an object it would
	// write that already exists on the physical cluster and was not
	// created by kcp (no sync-target label of that SyncTarget): Refuse
	// (the default) leaves it as it is and reports the conflict; Adopt
	// takes it over (labels it as kcp's) and applies kcp's spec from then
	// on. Objects downstream that the workspace does not have are never
	// touched either way.
	ConflictResolution string `json:"conflictResolution,omitempty"`

	// Tolerations let the namespaces use SyncTargets with matching taints
	// (taints.go).
	Tolerations []Toleration `json:"tolerations,omitempty"`

	// Groups, in order of preference, make Divide an overflow division
	// (overflow.go): each namespace runs on every usable target of every
	// group, a Deployment's replicas fill the first group's targets up to
	// what they can hold of it, and only the rest goes to the next group;
	// replicas beyond what every group can hold go to the last group.
	// Needs mode Divide; numberOfClusters, allClusters, spreadByLabel,
	// weights, weightsFrom and minReplicasPerCluster do not combine with it.
	Groups []TargetGroup `json:"groups,omitempty"`
	// Rollout, when set, rolls a change of a placed Deployment's spec out
	// to the namespace's targets group by group (rollout.go).
	Rollout *RolloutSpec `json:"rollout,omitempty"`
}

// TargetGroup is one group of SyncTargets of an overflow division: the
// targets its selector matches (a target two groups match belongs to the
// first).
type TargetGroup struct {
	Name     string                `json:"name"`
	Selector *metav1.LabelSelector `json:"selector"`
}

// GroupOf is the index of the first of the Placement's groups whose
// selector matches labels, and false when none does (or the Placement has
// no groups).
func (s *PlacementSpec) GroupOf(labels map[string]string) (int, bool) {
	for i, g := range s.Groups {
		if g.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(g.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labelSet(labels)) {
			return i, true
		}
	}
	return 0, false
}

// Conflict resolutions of a Placement.
const (
	ConflictRefuse = "Refuse"
	ConflictAdopt  = "Adopt"
)

// Suspends reports whether the Placement pauses syncing to the SyncTarget
// of this name.
func (s *PlacementSpec) Suspends(target string) bool {
	return s.Suspend || slices.Contains(s.SuspendTargets, target)
}

// Wanted is how many targets a namespace of this Placement runs on, of
// available: all with AllClusters or Groups, else NumberOfClusters
// (default 1).
func (s *PlacementSpec) Wanted(available int) int {
	if s.AllClusters || len(s.Groups) > 0 {
		return available
	}
	if s.NumberOfClusters == nil || *s.NumberOfClusters < 1 {
		return 1
	}
	return int(*s.NumberOfClusters)
}

// PlacementStatus reports what the placement selects.
type PlacementStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// SelectedTargets are the Ready SyncTargets the placement may assign
	// namespaces to (location workspace path and name).
	SelectedTargets []string `json:"selectedTargets,omitempty"`
	// Namespaces is how many namespaces are assigned.
	Namespaces int `json:"namespaces,omitempty"`
	// ShadowedAPIs are negotiated APIs of the location that this workspace
	// is not served because a CRD of its own has the same name.
	ShadowedAPIs []string `json:"shadowedAPIs,omitempty"`
	// Groups are spec.groups in order, each with the selected targets it
	// holds (a group without any gets no replicas: the next one fills).
	Groups []GroupStatus `json:"groups,omitempty"`
}

// GroupStatus is one group of an overflow Placement.
type GroupStatus struct {
	Name    string   `json:"name"`
	Targets []string `json:"targets"`
}

// Conditions and reasons of a Placement.
const (
	ReasonTargetsSelected = "TargetsSelected"
	ReasonNoReadyTarget   = "NoReadyTarget"

	// ConditionSuspended is True while spec.suspend or spec.suspendTargets
	// pause syncing (reasons Suspended, TargetsSuspended), False once
	// resumed (Resumed).
	ConditionSuspended     = "Suspended"
	ReasonSuspended        = "Suspended"
	ReasonTargetsSuspended = "TargetsSuspended"
	ReasonResumed          = "Resumed"
)

// VerbUse is the verb, on synctargets in a location workspace, that
// creating a Placement needs. VerbSync, on one SyncTarget, lets its syncer
// use the syncer view of that target.
const (
	VerbUse  = "use"
	VerbSync = "sync"
)

// SyncerUserPrefix + <SyncTarget name> is the user name of a syncer's
// service account (kubectl kcp workload sync creates
// kcp-syncers/syncer-<target> in the location workspace).
const SyncerUserPrefix = "system:serviceaccount:kcp-syncers:syncer-"

// Assignment data on namespaces and synced objects.
const (
	// StateLabelPrefix + TargetKey(...) = "Sync" marks a namespace, and each
	// object of a synced resource in it, as assigned to that SyncTarget.
	StateLabelPrefix = "state.workload.kcp.io/"
	// StateSync is the value of an assignment label.
	StateSync = "Sync"
	// FinalizerPrefix + TargetKey(...) keeps an upstream object until the
	// target's syncer has deleted its downstream copy.
	FinalizerPrefix = "workload.kcp.io/syncer-"
	// AssignedTargetAnnotation names the assigned SyncTargets on a
	// namespace for humans: "<location workspace>/<name>", comma-separated
	// in name order when there are several.
	AssignedTargetAnnotation = "workload.kcp.io/sync-target"
)

// TargetKey is a short, stable key of one SyncTarget (its location
// workspace and name), fit for a label name: 12 base-36 characters of a
// SHA-256. It is the same everywhere, so kcp and the syncer agree on it.
func TargetKey(location, name string) string {
	sum := sha256.Sum256([]byte(location + "/" + name))
	v := new(big.Int).SetBytes(sum[:10]).Text(36)
	for len(v) < 12 {
		v = "0" + v
	}
	return v[:12]
}

// StateLabel and Finalizer for one SyncTarget.
func StateLabel(location, name string) string { return StateLabelPrefix + TargetKey(location, name) }
func Finalizer(location, name string) string  { return FinalizerPrefix + TargetKey(location, name) }

// SyncedResources are the resources a syncer syncs by default: every object
// of them in an assigned namespace goes to the physical cluster (how each
// kind is shared between several targets: SpreadOf). This is the one
// list; the syncer, its manifest's RBAC, placement admission and the
// placement controller all read it.
var SyncedResources = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "apps", Version: "v1", Resource: "daemonsets"},
	{Group: "batch", Version: "v1", Resource: "jobs"},
	{Group: "batch", Version: "v1", Resource: "cronjobs"},
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "persistentvolumeclaims"},
	{Version: "v1", Resource: "pods"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// WorkloadResources are the synced resources kcp serves only to run them:
// creating one in a namespace that no Placement selects is refused. Their
// schemas are negotiated from the physical clusters.
var WorkloadResources = []schema.GroupResource{
	{Group: "apps", Resource: "deployments"},
	{Group: "apps", Resource: "statefulsets"},
	{Group: "apps", Resource: "daemonsets"},
	{Group: "batch", Resource: "jobs"},
	{Group: "batch", Resource: "cronjobs"},
	{Group: "policy", Resource: "poddisruptionbudgets"},
	{Group: "autoscaling", Resource: "horizontalpodautoscalers"},
	{Resource: "services"},
	{Resource: "persistentvolumeclaims"},
	{Resource: "pods"},
	{Group: "networking.k8s.io", Resource: "ingresses"},
	{Group: "networking.k8s.io", Resource: "networkpolicies"},
}

// IsWorkloadResource reports whether gr is one of WorkloadResources.
func IsWorkloadResource(gr schema.GroupResource) bool {
	return slices.Contains(WorkloadResources, gr)
}

// AssignedTarget is one SyncTarget a namespace is assigned to.
type AssignedTarget struct {
	Location, Name, Key string
}

// AssignedTargets are the SyncTargets a namespace (its labels and
// annotations) is assigned to and synced on: named in
// AssignedTargetAnnotation and labelled StateSync, in the annotation's
// order, each once.
func AssignedTargets(labels, annotations map[string]string) []AssignedTarget {
	var out []AssignedTarget
	seen := map[string]bool{}
	for _, ref := range strings.Split(annotations[AssignedTargetAnnotation], ",") {
		location, name, ok := strings.Cut(strings.TrimSpace(ref), "/")
		if !ok || name == "" {
			continue
		}
		key := TargetKey(location, name)
		if seen[key] || labels[StateLabelPrefix+key] != StateSync {
			continue
		}
		seen[key] = true
		out = append(out, AssignedTarget{Location: location, Name: name, Key: key})
	}
	return out
}
