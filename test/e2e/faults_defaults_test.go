package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestFaultCRDsAndWorkspacesSessionsKilled: the write paths of a new CRD
// (stored with its initial conditions, then accepted names, then
// Established: two controller writes) and of a new workspace (its three
// default namespaces created in parallel, their service accounts and CA
// config maps) under PostgreSQL sessions killed while both are created.
// Nothing answers 500; every acknowledged CRD is there, had conditions from
// the start and becomes Established; every acknowledged workspace becomes
// Ready with default, kube-system and kube-public and their defaults.
func TestFaultCRDsAndWorkspacesSessionsKilled(t *testing.T) {
	ds := framework.FreshPostgres(t)
	s := framework.StartServer(t, ds)
	const tenant = "root:crd-faults"
	s.CreateWorkspaces(tenant)
	ctx := context.Background()
	cfg := s.Config(tenant)
	cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, 30*time.Second
	crds, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rootCfg := s.Config("root")
	rootCfg.QPS, rootCfg.Burst, rootCfg.Timeout = -1, 0, 30*time.Second
	root, err := dynamic.NewForConfig(rootCfg)
	if err != nil {
		t.Fatal(err)
	}
	crd := func(i int) *apiextensionsv1.CustomResourceDefinition {
		plural := fmt.Sprintf("faults%d", i)
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".faults.example.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "faults.example.com", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: fmt.Sprintf("Fault%d", i)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}}}}},
		}
	}
	var mu sync.Mutex
	var ackedCRDs, ackedWorkspaces []string
	codes := map[int]int{}
	record := func(err error) bool {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			return true
		}
		if st, ok := err.(apierrors.APIStatus); ok {
			codes[int(st.Status().Code)]++
		} else {
			codes[0]++
		}
		return false
	}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 8 {
				c := crd(w*100 + i)
				created, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, c, metav1.CreateOptions{})
				if record(err) {
					if len(created.Status.Conditions) == 0 {
						t.Errorf("CRD %s was answered without conditions", c.Name)
					}
					mu.Lock()
					ackedCRDs = append(ackedCRDs, c.Name)
					mu.Unlock()
				}
				time.Sleep(150 * time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 5 {
				name := fmt.Sprintf("ws-%d-%d", w, i)
				ws := &unstructured.Unstructured{Object: map[string]interface{}{
					"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "Workspace", "metadata": map[string]interface{}{"name": name}}}
				if _, err := root.Resource(tenancy.WorkspacesResource).Create(ctx, ws, metav1.CreateOptions{}); record(err) {
					mu.Lock()
					ackedWorkspaces = append(ackedWorkspaces, name)
					mu.Unlock()
				}
				time.Sleep(250 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	killSessions(t, ds)
	wg.Wait()
	t.Logf("acknowledged: %d CRDs, %d workspaces; failures by code: %v", len(ackedCRDs), len(ackedWorkspaces), codes)
	if codes[500] > 0 {
		t.Errorf("%d creates answered 500", codes[500])
	}
	if len(ackedCRDs) == 0 || len(ackedWorkspaces) == 0 {
		t.Fatal("nothing was acknowledged: the test measured nothing")
	}
	for _, name := range ackedCRDs {
		framework.Eventually(t, 60*time.Second, "CRD "+name+" Established", func() (bool, string) {
			got, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", got.Status.Conditions)
		})
	}
	for _, name := range ackedWorkspaces {
		waitWorkspaceWithDefaults(t, s, root, name)
	}
}

// waitWorkspaceWithDefaults waits until root's workspace name is Ready with
// its namespaces default, kube-system and kube-public, each with its
// service account "default" and config map kube-root-ca.crt.
func waitWorkspaceWithDefaults(t *testing.T, s *framework.Server, root dynamic.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	cluster := "root:" + name
	framework.Eventually(t, 90*time.Second, "workspace "+cluster+" with its default namespaces", func() (bool, string) {
		ws, err := root.Resource(tenancy.WorkspacesResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if phase, _, _ := unstructured.NestedString(ws.Object, "status", "phase"); phase != tenancy.PhaseReady {
			return false, "phase " + phase
		}
		c := s.Client(cluster)
		for _, ns := range []string{"default", "kube-system", "kube-public"} {
			if _, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, ns + ": " + err.Error()
			}
			if _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
				return false, ns + ": " + err.Error()
			}
		}
		return true, ""
	})
}
