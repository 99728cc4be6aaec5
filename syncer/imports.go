package syncer

import (
	"context"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/openapi/cached"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
)

// ImportedResource is a resource given with --resources: a CRD the
// physical cluster serves, reported to kcp and synced like the built-in
// ones.
type ImportedResource struct {
	GroupResource schema.GroupResource
	// Storage is the version the syncer reads and writes.
	Storage schema.GroupVersionResource
}

// ParseResources reads --resources: "plural.group" names of CRDs.
func ParseResources(list []string) ([]schema.GroupResource, error) {
	var out []schema.GroupResource
	seen := map[string]bool{}
	for _, r := range list {
		r = strings.TrimSpace(r)
		if r == "" || seen[r] {
			continue
		}
		seen[r] = true
		plural, group, ok := strings.Cut(r, ".")
		if !ok || plural == "" || !strings.Contains(group, ".") {
			return nil, fmt.Errorf("--resources %q: want the name of a CustomResourceDefinition, <plural>.<group> (for example widgets.example.com)", r)
		}
		out = append(out, schema.GroupResource{Group: group, Resource: plural})
	}
	return out, nil
}

// ResolveImports finds each resource's CRD on the physical cluster.
func ResolveImports(ctx context.Context, down apiextensionsclient.Interface, grs []schema.GroupResource) ([]ImportedResource, error) {
	var out []ImportedResource
	for _, gr := range grs {
		crd, err := down.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, apiresource.NegotiatedName(gr), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("--resources %s: the physical cluster has no CustomResourceDefinition %s (only CRDs can be imported; %s)",
				apiresource.NegotiatedName(gr), apiresource.NegotiatedName(gr), "Deployments, Services, Ingresses, ConfigMaps, Secrets and ServiceAccounts are synced without it")
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ImportedResource{GroupResource: gr, Storage: storageVersion(crd)})
	}
	return out, nil
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) schema.GroupVersionResource {
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			gvr.Version = v.Name
		}
	}
	return gvr
}

// ReportImports writes, until ctx ends, an APIResourceImport per imported
// resource in the SyncTarget's workspace with the definition the physical
// cluster serves, and updates it when that changes.
func ReportImports(ctx context.Context, upstream dynamic.Interface, target string, down apiextensionsclient.Interface, imports []ImportedResource, interval time.Duration) {
	if len(imports) == 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	// The schema documents are fetched again only when the physical
	// cluster's OpenAPI changes (their URLs carry a hash).
	oapi := cached.NewClient(down.Discovery().OpenAPIV3())
	for {
		for _, imp := range imports {
			if err := report(ctx, upstream, target, down, oapi, imp); err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "reporting an API import", "resource", imp.GroupResource)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func report(ctx context.Context, upstream dynamic.Interface, target string, down apiextensionsclient.Interface, oapi openapi.Client, imp ImportedResource) error {
	gr := imp.GroupResource
	var spec apiextensionsv1.CustomResourceDefinitionSpec
	if workload.IsWorkloadResource(gr) {
		s, err := builtInSpec(ctx, down.Discovery(), oapi, imp.Storage)
		if err != nil {
			return err
		}
		spec = *s
	} else {
		crd, err := down.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, apiresource.NegotiatedName(gr), metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec = *crd.Spec.DeepCopy()
		// What kcp serves converts nothing (and calls no webhook of the
		// physical cluster).
		spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	}
	want := apiresource.APIResourceImportSpec{SyncTarget: target, CRD: spec}
	r := upstream.Resource(apiresource.ImportsResource)
	name := apiresource.ImportName(target, gr)
	existing, err := r.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj := &apiresource.APIResourceImport{
			TypeMeta:   metav1.TypeMeta{APIVersion: apiresource.Group + "/" + apiresource.Version, Kind: "APIResourceImport"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       want,
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		_, err = r.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{FieldManager: FieldManager})
		return err
	}
	if err != nil {
		return err
	}
	var cur apiresource.APIResourceImport
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(existing.Object, &cur); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(cur.Spec, want) {
		return nil
	}
	cur.Spec = want
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cur)
	if err != nil {
		return err
	}
	_, err = r.Update(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}
