// Package workload holds the workload.kcp.io/v1alpha1 API of the
// multi-cluster half of kcp. SyncTarget registers one physical cluster in a
// workspace; its syncer reports the cluster's health and capacity in its
// status. Served from CRDs that kcp installs in root and shares with every
// logical cluster (crds/), like tenancy.kcp.io.
package workload

import (
	"embed"

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
}

// SyncTargetStatus is what the syncer reports.
type SyncTargetStatus struct {
	Conditions        []metav1.Condition  `json:"conditions,omitempty"`
	LastHeartbeatTime *metav1.Time        `json:"lastHeartbeatTime,omitempty"`
	KubernetesVersion string              `json:"kubernetesVersion,omitempty"`
	Allocatable       corev1.ResourceList `json:"allocatable,omitempty"`
	Capacity          corev1.ResourceList `json:"capacity,omitempty"`
	Nodes             int                 `json:"nodes,omitempty"`
	ReadyNodes        int                 `json:"readyNodes,omitempty"`
}

// CRDs are the YAML definitions kcp installs in root.
//
//go:embed crds/*.yaml
var CRDs embed.FS
