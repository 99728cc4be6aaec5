package systemcrds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/schema/workload"
)

func fastBackoff(t *testing.T) {
	old := startBackoff
	startBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 5}
	t.Cleanup(func() { startBackoff = old })
}

// established are the system CRDs as a running server has them.
func established(t *testing.T) []runtime.Object {
	var out []runtime.Object
	for _, defs := range []fs.FS{tenancy.CRDs, workload.CRDs, apiresource.CRDs, apis.CRDs} {
		files, _ := fs.Glob(defs, "crds/*.yaml")
		for _, f := range files {
			raw, _ := fs.ReadFile(defs, f)
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.Unmarshal(raw, crd); err != nil {
				t.Fatal(err)
			}
			crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
			out = append(out, crd)
		}
	}
	if len(out) == 0 {
		t.Fatal("no system CRDs")
	}
	return out
}

// Another replica updating the same CRDs at start (a conflict) and a
// datastore answering 503 do not stop the server: the writes are retried.
func TestInstallRetriesTransientErrors(t *testing.T) {
	fastBackoff(t)
	client := apiextensionsfake.NewSimpleClientset(established(t)...)
	var failed atomic.Int32
	client.PrependReactor("update", "customresourcedefinitions", func(a clienttesting.Action) (bool, runtime.Object, error) {
		switch failed.Add(1) {
		case 1:
			return true, nil, apierrors.NewConflict(apiextensionsv1.Resource("customresourcedefinitions"), "x", errors.New("the object has been modified"))
		case 2:
			return true, nil, apierrors.NewServiceUnavailable("the datastore did not store the write")
		}
		return false, nil, nil
	})
	if err := install(context.Background(), client); err != nil {
		t.Fatalf("install with a conflict and a 503 on the way: %v", err)
	}
	if failed.Load() < 3 {
		t.Errorf("the failing updates were not retried (%d updates)", failed.Load())
	}

	// An error that stays is reported, naming the CRD, once the retries
	// are spent.
	stuck := apiextensionsfake.NewSimpleClientset(established(t)...)
	stuck.PrependReactor("update", "customresourcedefinitions", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(apiextensionsv1.Resource("customresourcedefinitions"), "x", errors.New("refused"))
	})
	err := install(context.Background(), stuck)
	if err == nil || !strings.Contains(err.Error(), "installing ") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a lasting error: %v", err)
	}
}

func TestBuiltInTypesRetryTransientErrors(t *testing.T) {
	fastBackoff(t)
	scheme := runtime.NewScheme()
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{tenancy.WorkspaceTypesResource: "WorkspaceTypeList"})
	var failed atomic.Int32
	// The fake's tracker does not create on apply; this reactor does, as
	// the server does, and refuses anything but an apply.
	d.PrependReactor("patch", "workspacetypes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if failed.Add(1) == 1 {
			return true, nil, apierrors.NewTooManyRequests("the server is warming up", 1)
		}
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return true, nil, fmt.Errorf("a %s patch, not an apply", p.GetPatchType())
		}
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(p.GetPatch(), &u.Object); err != nil {
			return true, nil, err
		}
		u.SetName(p.GetName())
		return true, u, d.Tracker().Create(tenancy.WorkspaceTypesResource, u, "")
	})
	if err := installBuiltInTypes(context.Background(), d); err != nil {
		t.Fatalf("built-in types with a 429 on the way: %v", err)
	}
	for name := range tenancy.BuiltInTypes {
		if _, err := d.Resource(tenancy.WorkspaceTypesResource).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("WorkspaceType %s: %v", name, err)
		}
	}
}
