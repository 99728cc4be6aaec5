// Package apis holds the apis.kcp.io/v1alpha1 API of API sharing. A
// provider workspace publishes an API as immutable APIResourceSchemas and
// an APIExport naming the ones it serves; a consumer workspace binds the
// export with an APIBinding and is then served the API, with objects stored
// in the consumer. Served from CRDs kcp installs in root and shares with
// every logical cluster (crds/).
package apis

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// Group and Version of the API.
const (
	Group   = "apis.kcp.io"
	Version = "v1alpha1"

	// VerbBind on apiexports/<name> in the provider workspace lets a user
	// bind the export from another workspace.
	VerbBind = "bind"
	// VerbContent on apiexports/<name> in the provider workspace lets a
	// user read and write, through the export's view, the bound objects of
	// every consumer.
	VerbContent = "content"

	// IdentityAnnotation, on a definition served for a binding, is the
	// identity of the export it comes from.
	IdentityAnnotation = "apis.kcp.io/identity"
	// BindingAnnotation, on such a definition, names the APIBinding.
	BindingAnnotation = "apis.kcp.io/binding"

	// BindingFinalizer holds a deleted APIBinding until the workspace's
	// objects of its resources are deleted.
	BindingFinalizer = "apis.kcp.io/apibinding"

	// ConditionBound, on an APIBinding: its export's resources are served
	// in the workspace.
	ConditionBound = "Bound"
	// ConditionReady, on an APIExport: its schemas exist and are valid.
	ConditionReady = "Ready"

	// ClaimAccepted and ClaimRejected are a consumer's answers to a
	// permission claim.
	ClaimAccepted = "Accepted"
	ClaimRejected = "Rejected"
)

// Resources of the API.
var (
	SchemasResource  = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "apiresourceschemas"}
	ExportsResource  = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "apiexports"}
	BindingsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "apibindings"}
)

// APIResourceSchema is one published, immutable version of one resource's
// definition, in the provider workspace. Its name is
// <prefix>.<plural>.<group>; a new schema is a new object.
type APIResourceSchema struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              APIResourceSchemaSpec `json:"spec,omitempty"`
}

// APIResourceSchemaSpec is a CustomResourceDefinition's spec without
// conversion webhooks.
type APIResourceSchemaSpec struct {
	Group    string                                            `json:"group"`
	Names    apiextensionsv1.CustomResourceDefinitionNames     `json:"names"`
	Scope    apiextensionsv1.ResourceScope                     `json:"scope"`
	Versions []apiextensionsv1.CustomResourceDefinitionVersion `json:"versions"`
}

// APIExport offers the resources of its schemas to other workspaces.
type APIExport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              APIExportSpec   `json:"spec,omitempty"`
	Status            APIExportStatus `json:"status,omitempty"`
}

// APIExportSpec names the schemas served to consumers (one per resource)
// and what the provider asks of each consumer's other resources.
type APIExportSpec struct {
	LatestResourceSchemas []string          `json:"latestResourceSchemas,omitempty"`
	PermissionClaims      []PermissionClaim `json:"permissionClaims,omitempty"`
}

// PermissionClaim asks a consumer to let the provider's view reach one of
// its resources (not one of the export's) with some verbs.
type PermissionClaim struct {
	Group    string   `json:"group,omitempty"`
	Resource string   `json:"resource"`
	Verbs    []string `json:"verbs"`
	// LabelSelector limits the claim to objects with these labels (absent:
	// every object of the resource). A consumer accepts a claim with its
	// selector; a provider that changes the selector needs acceptance again.
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// GroupResource is the claimed resource.
func (c PermissionClaim) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: c.Group, Resource: c.Resource}
}

// APIExportStatus reports the export's identity and whether its schemas
// are usable.
type APIExportStatus struct {
	IdentityHash string             `json:"identityHash,omitempty"`
	Conditions   []metav1.Condition `json:"conditions,omitempty"`
}

// APIBinding binds an export into the workspace it is created in.
type APIBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              APIBindingSpec   `json:"spec,omitempty"`
	Status            APIBindingStatus `json:"status,omitempty"`
}

// APIBindingSpec names the export and answers its permission claims.
type APIBindingSpec struct {
	Reference        ExportReference        `json:"reference"`
	PermissionClaims []AcceptablePermission `json:"permissionClaims,omitempty"`
}

// ExportReference is an export by workspace path and name.
type ExportReference struct {
	Export ExportName `json:"export"`
}

// ExportName names an APIExport.
type ExportName struct {
	Path string `json:"path"`
	Name string `json:"name"`
}

// AcceptablePermission is a consumer's answer to one claim.
type AcceptablePermission struct {
	PermissionClaim `json:",inline"`
	State           string `json:"state"`
}

// APIBindingStatus says what is bound.
type APIBindingStatus struct {
	Phase          string             `json:"phase,omitempty"`
	IdentityHash   string             `json:"identityHash,omitempty"`
	BoundResources []BoundResource    `json:"boundResources,omitempty"`
	ExportClaims   []PermissionClaim  `json:"exportPermissionClaims,omitempty"`
	AcceptedClaims []PermissionClaim  `json:"acceptedPermissionClaims,omitempty"`
	Conditions     []metav1.Condition `json:"conditions,omitempty"`
}

// BoundResource is one resource served through the binding.
type BoundResource struct {
	Group    string `json:"group"`
	Resource string `json:"resource"`
	Schema   string `json:"schema"`
	// StorageVersion is the version objects are stored in.
	StorageVersion string `json:"storageVersion"`
}

// Phases of an APIBinding.
const (
	PhaseBound   = "Bound"
	PhaseBinding = "Binding"
)

// Identity is the identity of an export: what keeps the objects of two
// exports of the same group and resource apart in storage. It is computed
// by kcp from where the export is and which object it is, never taken from
// a client: a workspace cannot name itself as someone else's export, and
// an export deleted and created again is a new identity.
func Identity(provider string, name string, uid types.UID) string {
	sum := sha256.Sum256([]byte(provider + "\x00" + name + "\x00" + string(uid)))
	return hex.EncodeToString(sum[:10])
}

//go:embed crds/*.yaml
var CRDs embed.FS

// builtinGroups are Kubernetes's built-in API groups (client-go knows
// every one), whether or not kcp serves them itself.
var builtinGroups = func() map[string]bool {
	out := map[string]bool{}
	for _, gv := range scheme.Scheme.PrioritizedVersionsAllGroups() {
		out[gv.Group] = true
	}
	return out
}()

// ReservedGroup reports whether an API group belongs to Kubernetes or kcp
// by its name: the legacy group, a group without a dot (apps, batch,
// policy, ...), one of Kubernetes's built-in groups, or a group in kcp's
// domain (kcp.io). An APIResourceSchema cannot define such a group, and an
// export's view never serves one. (Groups of CRDs that Kubernetes projects
// ship, like gateway.networking.k8s.io, are not built in: a physical
// cluster's CRD of such a group is negotiated and exported like any.)
func ReservedGroup(group string) bool {
	return !strings.Contains(group, ".") || builtinGroups[group] || group == "kcp.io" || strings.HasSuffix(group, ".kcp.io")
}
