// Package systemcrds installs kcp's own CRDs (tenancy.kcp.io, workload.kcp.io) in root at
// start-up and waits until they are established. Custom resources are served
// from root's definitions in every logical cluster, so these APIs exist in
// all of them while each cluster keeps its own objects.
package systemcrds

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Install creates or updates the CRDs and waits for them to be established.
func Install(ctx context.Context, cfg *rest.Config) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return install(ctx, client)
}

// startBackoff is how the start-up writes are retried: another replica
// starting at the same time updates the same CRDs (a conflict), the
// datastore may answer 503 and priority and fairness 429 while the server
// warms up. A post-start hook that fails stops the server, so each write is
// tried for about half a minute before the error is final.
var startBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 12, Cap: 5 * time.Second}

// retried runs f until it succeeds, retrying every error with startBackoff;
// it returns the last error, naming what.
func retried(ctx context.Context, what string, f func(context.Context) error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, startBackoff, func(ctx context.Context) (bool, error) {
		if last = f(ctx); last != nil {
			klog.InfoS("start-up write failed; retrying", "what", what, "err", last)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%s: %w", what, last)
	}
	return err
}

// install writes every CRD at once and waits for all of them: each one
// alone is a write and then a wait of about 100 ms for the establishing
// controller, so one after another they were over a second of a cold
// start. The first error is returned once all are done.
func install(ctx context.Context, client apiextensionsclient.Interface) error {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, defs := range []fs.FS{tenancy.CRDs, workload.CRDs, apiresource.CRDs, apis.CRDs} {
		files, err := fs.Glob(defs, "crds/*.yaml")
		if err != nil {
			return err
		}
		for _, f := range files {
			raw, err := fs.ReadFile(defs, f)
			if err != nil {
				return err
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(raw, crd); err != nil {
				return fmt.Errorf("%s: %v", f, err)
			}
			crds = append(crds, crd)
		}
	}
	errs := make([]error, len(crds))
	var wg sync.WaitGroup
	for i, crd := range crds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = retried(ctx, "installing "+crd.Name, func(ctx context.Context) error { return apply(ctx, client, crd) })
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, client apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	existing, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		existing.Spec = crd.Spec
		if _, err := crds.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	// Read from the watch cache: a consistent read is a datastore query,
	// and all of kcp's CRDs wait at once.
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// InstallBuiltInTypes creates the built-in WorkspaceTypes
// (tenancy.BuiltInTypes) in root where they are missing. One that exists
// is left as the operator made it; one deleted comes back at the next
// start, as upstream's bootstrap roles do.
func InstallBuiltInTypes(ctx context.Context, loopback *rest.Config) error {
	d, err := dynamic.NewForConfig(clusterinformer.ForCluster(loopback, logicalcluster.Root))
	if err != nil {
		return err
	}
	return installBuiltInTypes(ctx, d)
}

// builtInTypesManager is the field manager of the built-in types' first
// write.
const builtInTypesManager = "kcp"

func installBuiltInTypes(ctx context.Context, d dynamic.Interface) error {
	res := d.Resource(tenancy.WorkspaceTypesResource)
	for name, description := range tenancy.BuiltInTypes {
		wt := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": tenancy.Group + "/" + tenancy.Version,
			"kind":       "WorkspaceType",
			"metadata":   map[string]interface{}{"name": name},
			"spec":       map[string]interface{}{"description": description},
		}}
		if err := retried(ctx, "WorkspaceType "+name, func(ctx context.Context) error {
			_, err := res.Get(ctx, name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return err // there (nil), or ask again
			}
			// A missing type is written with a server-side apply, not a
			// create: upstream's custom resource handler holds every create
			// in a CRD Established less than 2 s ago for 2 s (so that in a
			// high-availability setup every API server has seen the CRD
			// before a client reads the object back), and on a new database
			// kcp's CRDs were established a moment ago: that wait was two
			// thirds of a cold start. Here it guards nothing: no replica
			// answers /readyz, so none serves a client, before its own
			// kcp-tenancy hook has seen these CRDs Established. Without
			// force, an apply that finds the type written by someone else a
			// moment ago with another description is a conflict, retried,
			// and then the type is found and left alone.
			_, err = res.Apply(ctx, name, wt, metav1.ApplyOptions{FieldManager: builtInTypesManager})
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
