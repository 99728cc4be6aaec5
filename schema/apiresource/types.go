// Package apiresource holds the apiresource.kcp.io/v1alpha1 API of API
// negotiation. A syncer reports, in its SyncTarget's workspace, one
// APIResourceImport per resource it was asked to sync beyond the built-in
// ones: the definition (a CustomResourceDefinition's spec) its physical
// cluster serves. kcp negotiates, per resource and location workspace, the
// least common denominator of every import (schema/lcd) into a
// NegotiatedAPIResource. The negotiated definitions of resources that are
// not built in are published through API sharing (apis.kcp.io): kcp keeps
// one APIResourceSchema per negotiated definition and the APIExport
// "kubernetes" in the location workspace, and binds that export in every
// workspace whose Placement uses the location. Served from CRDs kcp
// installs in root and shares with every logical cluster (crds/).
package apiresource

import (
	"embed"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API.
const (
	Group   = "apiresource.kcp.io"
	Version = "v1alpha1"

	// ConditionCompatible, on an import: its definition is part of what is
	// negotiated (False: it conflicts with the others and is left out).
	ConditionCompatible = "Compatible"
	// ConditionPublished, on a negotiated resource: workspaces placed on the
	// location are served the definition.
	ConditionPublished = "Published"

	// ExportName is the APIExport, in a location workspace, of the
	// negotiated resources that are not built in. kcp owns it.
	ExportName = "kubernetes"
	// NegotiatedLabel marks the APIResourceSchemas and the APIExport kcp
	// publishes from negotiation, and the APIBindings it creates for
	// Placements.
	NegotiatedLabel = "apiresource.kcp.io/negotiated"
)

// BindingName is the APIBinding kcp creates, in a workspace with a
// Placement on location, to the location's export: kubernetes.<location
// with dots> (workspace names have no dots, so it names one location).
func BindingName(location string) string {
	return ExportName + "." + strings.ReplaceAll(location, ":", ".")
}

// Resources of the API.
var (
	ImportsResource    = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "apiresourceimports"}
	NegotiatedResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "negotiatedapiresources"}
)

// APIResourceImport is what one physical cluster serves for one resource.
type APIResourceImport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              APIResourceImportSpec `json:"spec,omitempty"`
	Status            ImportStatus          `json:"status,omitempty"`
}

// APIResourceImportSpec names the SyncTarget and carries the definition.
type APIResourceImportSpec struct {
	SyncTarget string                                       `json:"syncTarget"`
	CRD        apiextensionsv1.CustomResourceDefinitionSpec `json:"crd"`
}

// ImportStatus says whether the import is part of the negotiation.
type ImportStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NegotiatedAPIResource is the definition served to workspaces placed on
// the location: the least common denominator of its compatible imports.
type NegotiatedAPIResource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NegotiatedSpec   `json:"spec,omitempty"`
	Status            NegotiatedStatus `json:"status,omitempty"`
}

// NegotiatedSpec is the negotiated definition.
type NegotiatedSpec struct {
	CRD apiextensionsv1.CustomResourceDefinitionSpec `json:"crd"`
}

// NegotiatedStatus lists which imports the definition came from and which
// conflicted.
type NegotiatedStatus struct {
	Conditions   []metav1.Condition `json:"conditions,omitempty"`
	Imports      []string           `json:"imports,omitempty"`
	Incompatible []string           `json:"incompatible,omitempty"`
	// Dropped lists what some physical cluster lacks, so the negotiated
	// definition leaves it out.
	Dropped []string `json:"dropped,omitempty"`
}

// ImportName is the name of a SyncTarget's import of a resource.
func ImportName(target string, gr schema.GroupResource) string {
	return target + "." + NegotiatedName(gr)
}

// NegotiatedName is the name of the negotiated resource (a CRD's name;
// <plural>.core for the core group, which has no name).
func NegotiatedName(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource + ".core"
	}
	return gr.Resource + "." + gr.Group
}

// CRDs are the YAML definitions kcp installs in root.
//
//go:embed crds/*.yaml
var CRDs embed.FS
