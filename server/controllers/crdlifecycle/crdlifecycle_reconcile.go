package crdlifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/metadata"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

type reconciler struct {
	get            func(logicalcluster.Name, string) (*apiextensionsv1.CustomResourceDefinition, bool)
	list           func(logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition
	reserved       func(group string) bool
	crdClient      func(logicalcluster.Name) (apiextensionsclient.Interface, error)
	metadataClient func(logicalcluster.Name) (metadata.Interface, error)
	enqueue        func(logicalcluster.Name, string)
}

func (r *reconciler) reconcile(ctx context.Context, cluster logicalcluster.Name, name string) (time.Duration, error) {
	crd, ok := r.get(cluster, name)
	if !ok {
		return 0, nil
	}
	if crd.DeletionTimestamp != nil {
		return r.finalize(ctx, cluster, crd)
	}
	want := crd.DeepCopy()
	names, accepted := acceptNames(crd, r.list(cluster))
	if r.reserved(crd.Spec.Group) {
		names = crd.Status.AcceptedNames
		accepted = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse,
			Reason: "ReservedGroup", Message: fmt.Sprintf("the API group %q is served by kcp in every logical cluster; a CRD cannot redefine it", crd.Spec.Group)}
	}
	want.Status.AcceptedNames = names
	apihelpers.SetCRDCondition(want, accepted)
	switch {
	case apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established):
	case accepted.Status == apiextensionsv1.ConditionTrue && apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) &&
		equality.Semantic.DeepEqual(crd.Status.AcceptedNames, names):
		// The serving cache (which this CRD was read from) already has the
		// accepted names, so this process serves the resource, its
		// discovery and its OpenAPI: a client that sees Established can
		// use all three at once.
		apihelpers.SetCRDCondition(want, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue,
			Reason: "InitialNamesAccepted", Message: "the initial names have been accepted",
		})
	case accepted.Status == apiextensionsv1.ConditionTrue:
		apihelpers.SetCRDCondition(want, installing)
	default:
		apihelpers.SetCRDCondition(want, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
			Reason: "NotAccepted", Message: "not all names are accepted",
		})
	}
	setOrRemove(want, apiextensionsv1.NonStructuralSchema, nonStructural(crd))
	setOrRemove(want, apiextensionsv1.KubernetesAPIApprovalPolicyConformant, approval(crd))
	if equality.Semantic.DeepEqual(crd.Status, want.Status) {
		return 0, nil
	}
	client, err := r.crdClient(cluster)
	if err != nil {
		return 0, err
	}
	_, err = client.ApiextensionsV1().CustomResourceDefinitions().UpdateStatus(ctx, want, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil // the next event brings the current object
	}
	return 0, err
}

// installing is Established while the names are accepted but the resource
// is not served yet.
var installing = apiextensionsv1.CustomResourceDefinitionCondition{
	Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
	Reason: "Installing", Message: "the resource is not served yet",
}

// InitialConditions completes a CRD as it is first stored (see
// clusterstore.WithOnCreate): upstream stores new CRDs without conditions
// and its controllers add them within milliseconds; here, under load, that
// took seconds, and kubectl wait --for=condition=Established failed at once
// on the missing list. obj is the internal type the storage layer sees.
//
// kcp's own CRDs (the system cluster, which only the server itself writes)
// are stored with their names accepted and Established: they cannot
// conflict with each other, and upstream's naming and establishing
// controllers took two writes each, one CRD after another, about 0.7 s of
// every cold start (docs/performance.md, "Start-up").
func InitialConditions(obj runtime.Object) {
	crd, ok := obj.(*apiextensionsinternal.CustomResourceDefinition)
	if !ok || len(crd.Status.Conditions) > 0 {
		return
	}
	now := metav1.Now()
	if logicalcluster.Name(crd.Annotations[logicalcluster.Annotation]) == logicalcluster.SystemCRDs {
		crd.Status.AcceptedNames = crd.Spec.Names
		crd.Status.Conditions = []apiextensionsinternal.CustomResourceDefinitionCondition{
			{Type: apiextensionsinternal.NamesAccepted, Status: apiextensionsinternal.ConditionTrue, LastTransitionTime: now,
				Reason: "NoConflicts", Message: "kcp's own definition: its names are accepted as stored"},
			{Type: apiextensionsinternal.Established, Status: apiextensionsinternal.ConditionTrue, LastTransitionTime: now,
				Reason: "InitialNamesAccepted", Message: "kcp's own definition: established as stored"},
		}
		return
	}
	crd.Status.Conditions = []apiextensionsinternal.CustomResourceDefinitionCondition{
		{Type: apiextensionsinternal.NamesAccepted, Status: apiextensionsinternal.ConditionUnknown, LastTransitionTime: now,
			Reason: "Checking", Message: "the names are being checked against the other definitions of the logical cluster"},
		{Type: apiextensionsinternal.Established, Status: apiextensionsinternal.ConditionFalse, LastTransitionTime: now,
			Reason: installing.Reason, Message: installing.Message},
	}
}

func setOrRemove(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType, c *apiextensionsv1.CustomResourceDefinitionCondition) {
	if c == nil {
		apihelpers.RemoveCRDCondition(crd, t)
		return
	}
	apihelpers.SetCRDCondition(crd, *c)
}

// acceptNames decides which of the requested names a CRD may have: a name
// is refused when another CRD of the same group in the same cluster has
// already accepted it. Refused names keep their previously accepted value.
func acceptNames(crd *apiextensionsv1.CustomResourceDefinition, all []*apiextensionsv1.CustomResourceDefinition) (apiextensionsv1.CustomResourceDefinitionNames, apiextensionsv1.CustomResourceDefinitionCondition) {
	resources, kinds := sets.New[string](), sets.New[string]()
	for _, other := range all {
		if other.Name == crd.Name || other.Spec.Group != crd.Spec.Group {
			continue
		}
		n := other.Status.AcceptedNames
		resources.Insert(n.Plural, n.Singular)
		resources.Insert(n.ShortNames...)
		kinds.Insert(n.Kind, n.ListKind)
	}
	resources.Delete("")
	kinds.Delete("")
	req, out := crd.Spec.Names, crd.Status.AcceptedNames
	var reason, msg string
	conflict := func(r, m string) {
		if reason == "" {
			reason, msg = r, m
		}
	}
	inUse := func(n string) string { return fmt.Sprintf("%q is already in use", n) }
	if resources.Has(req.Plural) {
		conflict("PluralConflict", inUse(req.Plural))
	} else {
		out.Plural = req.Plural
	}
	if resources.Has(req.Singular) {
		conflict("SingularConflict", inUse(req.Singular))
	} else {
		out.Singular = req.Singular
	}
	var taken []string
	for _, s := range req.ShortNames {
		if resources.Has(s) {
			taken = append(taken, inUse(s))
		}
	}
	if len(taken) > 0 {
		conflict("ShortNamesConflict", strings.Join(taken, ", "))
	} else {
		out.ShortNames = req.ShortNames
	}
	if kinds.Has(req.Kind) {
		conflict("KindConflict", inUse(req.Kind))
	} else {
		out.Kind = req.Kind
	}
	if kinds.Has(req.ListKind) {
		conflict("ListKindConflict", inUse(req.ListKind))
	} else {
		out.ListKind = req.ListKind
	}
	out.Categories = req.Categories
	if reason != "" {
		return out, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse, Reason: reason, Message: msg}
	}
	return out, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", Message: "no conflicts found"}
}

// nonStructural reports schemas that are not structural (only CRDs stored
// before v1 validation can have them).
func nonStructural(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinitionCondition {
	var errs field.ErrorList
	if crd.Spec.PreserveUnknownFields {
		errs = append(errs, field.Invalid(field.NewPath("spec", "preserveUnknownFields"), true, "must be false"))
	}
	for i, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		internal := &apiextensionsinternal.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
			continue
		}
		s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return &apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NonStructuralSchema, Status: apiextensionsv1.ConditionUnknown,
				Reason: "StructuralError", Message: fmt.Sprintf("failed to check validation schema for version %s: %v", v.Name, err)}
		}
		errs = append(errs, structuralschema.ValidateStructural(field.NewPath("spec", "versions").Index(i).Child("schema", "openAPIV3Schema"), s)...)
	}
	if len(errs) == 0 {
		return nil
	}
	return &apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NonStructuralSchema, Status: apiextensionsv1.ConditionTrue,
		Reason: "Violations", Message: errs.ToAggregate().Error()}
}

// approval is the condition groups under k8s.io and kubernetes.io carry.
func approval(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinitionCondition {
	if !apihelpers.IsProtectedCommunityGroup(crd.Spec.Group) {
		return nil
	}
	state, msg := apihelpers.GetAPIApprovalState(crd.Annotations)
	c := &apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.KubernetesAPIApprovalPolicyConformant, Message: msg}
	switch state {
	case apihelpers.APIApproved:
		c.Status, c.Reason = apiextensionsv1.ConditionTrue, "ApprovedAnnotation"
	case apihelpers.APIApprovalBypassed:
		c.Status, c.Reason = apiextensionsv1.ConditionFalse, "UnapprovedAnnotation"
	case apihelpers.APIApprovalMissing:
		c.Status, c.Reason = apiextensionsv1.ConditionFalse, "MissingAnnotation"
	case apihelpers.APIApprovalInvalid:
		c.Status, c.Reason = apiextensionsv1.ConditionFalse, "InvalidAnnotation"
	default:
		c.Status, c.Reason = apiextensionsv1.ConditionUnknown, "UnknownAnnotation"
	}
	return c
}

// finalize deletes the custom resources of a CRD being deleted, in its
// cluster only, through the API (so their own finalizers and watchers are
// honoured), then releases the CRD.
func (r *reconciler) finalize(ctx context.Context, cluster logicalcluster.Name, crd *apiextensionsv1.CustomResourceDefinition) (time.Duration, error) {
	if !apihelpers.CRDHasFinalizer(crd, apiextensionsv1.CustomResourceCleanupFinalizer) {
		return 0, nil
	}
	client, err := r.crdClient(cluster)
	if err != nil {
		return 0, err
	}
	want := crd.DeepCopy()
	remaining, err := r.deleteInstances(ctx, cluster, crd)
	terminating := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue}
	switch {
	case err != nil:
		terminating.Reason, terminating.Message = "InstanceDeletionFailed", fmt.Sprintf("could not delete instances: %v", err)
	case remaining > 0:
		terminating.Reason, terminating.Message = "InstanceDeletionInProgress", fmt.Sprintf("%d instances remaining", remaining)
	default:
		terminating.Status, terminating.Reason, terminating.Message = apiextensionsv1.ConditionFalse, "InstanceDeletionCompleted", "removed all instances"
		apihelpers.CRDRemoveFinalizer(want, apiextensionsv1.CustomResourceCleanupFinalizer)
	}
	apihelpers.SetCRDCondition(want, terminating)
	if !equality.Semantic.DeepEqual(crd, want) {
		if _, uerr := client.ApiextensionsV1().CustomResourceDefinitions().UpdateStatus(ctx, want, metav1.UpdateOptions{}); uerr != nil && !apierrors.IsNotFound(uerr) && !apierrors.IsConflict(uerr) {
			return 0, uerr
		}
	}
	if err != nil {
		return 0, err
	}
	if remaining > 0 {
		return time.Second, nil
	}
	return 0, nil
}

// deleteInstances deletes every custom resource of crd in cluster and
// returns how many were still there.
func (r *reconciler) deleteInstances(ctx context.Context, cluster logicalcluster.Name, crd *apiextensionsv1.CustomResourceDefinition) (int, error) {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && version == "" {
			version = v.Name
		}
	}
	if version == "" || !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		// Never served: no instance could have been created.
		return 0, nil
	}
	client, err := r.metadataClient(cluster)
	if err != nil {
		return 0, err
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Status.AcceptedNames.Plural}
	list, err := client.Resource(gvr).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var namespaces []string
	for _, item := range list.Items {
		if item.DeletionTimestamp != nil {
			continue
		}
		if !slices.Contains(namespaces, item.Namespace) {
			namespaces = append(namespaces, item.Namespace)
		}
	}
	for _, ns := range namespaces {
		res := client.Resource(gvr)
		var err error
		if ns == "" {
			err = res.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		} else {
			err = res.Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return len(list.Items), err
		}
	}
	if len(list.Items) == 0 {
		return 0, nil
	}
	after, err := client.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return len(list.Items), err
	}
	return len(after.Items), nil
}
