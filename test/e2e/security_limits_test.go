package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWorkspaceLimitsCannotBeLiftedOrLeaked is issue 49's item 8, as an
// attack table on both dialects (the count is storage's): the creator of a
// workspace (who may only create, get, list and watch Workspaces in the
// parent, and edits its own Workspace through the owner rule) tries to
// lift or drop the limits the parent set, or to set its own at create; a
// tenant at its cap tries to make room with deletions that delete nothing
// (dry runs, deletions a policy of its own refuses, objects a finalizer
// keeps). Each row names the hole.
func TestWorkspaceLimitsCannotBeLiftedOrLeaked(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			ctx := context.Background()
			grantClusterRole(t, s, "root", "sl-creator", `{apiGroups: ["tenancy.kcp.io"], resources: ["workspaces"], verbs: ["create", "get", "list", "watch"]}`, "creator")
			grantClusterRole(t, s, "root", "sl-manager", `{apiGroups: ["tenancy.kcp.io"], resources: ["workspaces"], verbs: ["get", "update", "patch"]}`, "manager")
			creatorCfg := framework.UserConfig(t, s, "creator")
			creatorCfg.Host = s.URL() + "/clusters/root"
			creatorDyn, err := dynamic.NewForConfig(creatorCfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := tenancy.CreateWorkspace(ctx, creatorDyn, "sl-owned", "", false, 30*time.Second); err != nil {
				t.Fatalf("the creator creates its workspace: %v", err)
			}
			s.Kubectl("root", "patch", "workspace", "sl-owned", "--type=merge", "-p", `{"spec":{"limits":{"objects":8}}}`)

			creator := framework.UserClient(t, s, "creator")
			manager := framework.UserClient(t, s, "manager")
			wsURL := s.URL() + "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces/"
			merge := map[string]string{"Content-Type": "application/merge-patch+json"}
			jsonPatch := map[string]string{"Content-Type": "application/json-patch+json"}
			limit := func() string {
				return s.Kubectl("root", "get", "workspace", "sl-owned", "-o", "jsonpath={.spec.limits.objects}")
			}
			refused := func(what string, code int, body string) {
				t.Helper()
				if code != http.StatusForbidden || !strings.Contains(body, "may not set spec.limits of workspace root:sl-owned") ||
					!strings.Contains(body, `need the verb \"update\" on workspaces.tenancy.kcp.io/sl-owned granted by the RBAC of root`) {
					t.Errorf("%s: want 403 naming the permission, got %d %s", what, code, body)
				}
				if l := limit(); l != "8" {
					t.Errorf("%s: spec.limits.objects is now %q", what, l)
				}
			}
			get := func() string {
				code, body := framework.Do(t, creator, http.MethodGet, wsURL+"sl-owned", "")
				if code != http.StatusOK {
					t.Fatalf("the creator reads its Workspace: %d %s", code, body)
				}
				return body
			}

			// Hole: the owner rule let the creator merge-patch its limits.
			code, body := framework.DoWith(t, creator, http.MethodPatch, wsURL+"sl-owned", `{"spec":{"limits":{"objects":100000}}}`, merge)
			refused("creator merge-patches spec.limits 8 -> 100000", code, body)
			// Hole: ... or drop them (back to the server's defaults: none).
			code, body = framework.DoWith(t, creator, http.MethodPatch, wsURL+"sl-owned", `[{"op":"remove","path":"/spec/limits"}]`, jsonPatch)
			refused("creator removes spec.limits (JSON patch)", code, body)
			// Hole: ... or replace the Workspace (PUT) with other limits.
			code, body = framework.Do(t, creator, http.MethodPut, wsURL+"sl-owned", strings.Replace(get(), `"objects":8`, `"objects":100000`, 1))
			refused("creator PUTs spec.limits 100000", code, body)
			// Hole: ... through a dry run the answer must be the same.
			code, body = framework.DoWith(t, creator, http.MethodPatch, wsURL+"sl-owned?dryRun=All", `{"spec":{"limits":{"bytes":1}}}`, merge)
			refused("creator dry-run patches spec.limits.bytes", code, body)
			// Hole: a creator sets its own limits at create.
			code, body = framework.Do(t, creator, http.MethodPost, wsURL,
				`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":"sl-self"},"spec":{"limits":{"objects":100000}}}`)
			if code != http.StatusForbidden || !strings.Contains(body, "may not set spec.limits of workspace root:sl-self") {
				t.Errorf("creator creates a workspace with its own limits: want 403, got %d %s", code, body)
			}
			// Not a hole: the owner still edits the rest of its Workspace.
			if code, body := framework.DoWith(t, creator, http.MethodPatch, wsURL+"sl-owned", `{"metadata":{"labels":{"team":"a"}}}`, merge); code != http.StatusOK {
				t.Errorf("the owner labels its Workspace: %d %s", code, body)
			}
			// The parent's RBAC decides: a manager granted update in root may.
			if code, body := framework.DoWith(t, manager, http.MethodPatch, wsURL+"sl-owned", `{"spec":{"limits":{"objects":12}}}`, merge); code != http.StatusOK {
				t.Fatalf("the parent's manager sets the limits: %d %s", code, body)
			}
			if l := limit(); l != "12" {
				t.Errorf("after the manager's patch, spec.limits.objects is %q", l)
			}

			testLimitsDoNotLeak(t, s, "root:sl-owned", 12)
		})
	}
}

// testLimitsDoNotLeak: ws is capped at limit objects by its Workspace;
// fill it, then try every deletion that deletes nothing, each followed by
// a create: none may get a create through.
func testLimitsDoNotLeak(t *testing.T, s *framework.Server, ws string, limit int) {
	ctx := context.Background()
	c := s.Client(ws)
	cms := c.CoreV1().ConfigMaps("default")
	create := func(name string, opts metav1.CreateOptions) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fill": "yes"}}}, opts)
		return err
	}
	capped := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), fmt.Sprintf("its limit (spec.limits.objects of its Workspace) is %d", limit))
	}
	// The tenant's own policy keeps fill-1 (see below).
	applyYAML(t, s, ws, `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: keep-fill-1}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["configmaps"]}]
  validations: [{expression: "oldObject.metadata.name != 'fill-1'", message: "fill-1 stays"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: keep-fill-1}
spec: {policyName: keep-fill-1, validationActions: [Deny]}
`)
	// Fill up to the cap (the limit reaches the LogicalCluster shortly
	// after the patch): the workspace's own defaults count.
	n := 0
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("%s capped at %d", ws, limit), func() (bool, string) {
		for ; n < 2*limit; n++ {
			if err := create(fmt.Sprintf("fill-%d", n), metav1.CreateOptions{}); err != nil {
				return capped(err), err.Error()
			}
		}
		return false, fmt.Sprintf("%d created", n)
	})
	live := func() int {
		l, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "fill=yes"})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	full := live()
	if full == 0 || full >= limit {
		t.Fatalf("%d configmaps at a cap of %d objects", full, limit)
	}
	row := 0
	leaked := func(what string, attempts int, deleteOnce func(i int) error) {
		t.Helper()
		row++
		got := 0
		for i := range attempts {
			_ = deleteOnce(i)
			err := create(fmt.Sprintf("leak-%d-%d", row, i), metav1.CreateOptions{})
			switch {
			case err == nil:
				got++
			case !capped(err):
				t.Errorf("%s: create %d: %v", what, i, err)
			}
		}
		if got > 0 || live() != full {
			t.Errorf("%s: %d creates got past the cap of %d (%d configmaps, %d before)", what, got, limit, live(), full)
		}
	}

	// Hole: each DELETE ?dryRun=All lowered the count by one.
	leaked("DELETE ?dryRun=All then create", 25, func(int) error {
		return cms.Delete(ctx, "fill-0", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	})
	// Hole: a deletion collection dry run, once per object.
	leaked("DELETE collection ?dryRun=All then create", 5, func(int) error {
		return cms.DeleteCollection(ctx, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}, metav1.ListOptions{LabelSelector: "fill=yes"})
	})
	// A dry-run create at the cap tells the truth, and takes no room.
	if err := create("dry", metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !capped(err) {
		t.Errorf("a dry-run create at the cap: %v", err)
	}

	// Hole: a deletion a later admission step refuses (here the tenant's own
	// ValidatingAdmissionPolicy, applied before filling up) was counted as
	// done.
	framework.Eventually(t, 30*time.Second, "the policy to refuse deleting fill-1", func() (bool, string) {
		err := cms.Delete(ctx, "fill-1", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "fill-1 stays"), fmt.Sprint(err)
	})
	leaked("refused DELETE then create", 15, func(int) error { return cms.Delete(ctx, "fill-1", metav1.DeleteOptions{}) })

	// Hole: deleting an object a finalizer keeps, again and again.
	if _, err := cms.Patch(ctx, "fill-2", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	leaked("DELETE of an object a finalizer keeps, then create", 15, func(int) error { return cms.Delete(ctx, "fill-2", metav1.DeleteOptions{}) })

	// Not a hole: a deletion that happens makes room at once, for one.
	if _, err := cms.Patch(ctx, "fill-2", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 10*time.Second, "fill-2 gone once its finalizer is", func() (bool, string) {
		_, err := cms.Get(ctx, "fill-2", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if err := create("after-finalizer", metav1.CreateOptions{}); err != nil {
		t.Errorf("a create after a finalized deletion: %v", err)
	}
	if err := cms.Delete(ctx, "fill-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("after-delete", metav1.CreateOptions{}); err != nil {
		t.Errorf("a create right after a deletion: %v", err)
	}
	if err := create("one-too-many", metav1.CreateOptions{}); !capped(err) {
		t.Errorf("a second create after one deletion: %v", err)
	}
	// What SQL says the workspace stores is within the cap.
	out := s.Kubectl(ws, "get", "logicalcluster", "cluster", "-o", "jsonpath={.spec.limits.objects}")
	if out != fmt.Sprint(limit) {
		t.Errorf("the LogicalCluster's limit: %q", out)
	}
}
