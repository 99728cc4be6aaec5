package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestFreeze is issue 54's read-only freeze, on both dialects: root's admin
// freezes root:team-a with `kubectl ws freeze`; every write into it is then
// refused with 403 naming the reason (built-in objects, a CRD's custom
// resources, namespaces; system:masters included), while reads, a watch
// opened before, access reviews and service-account tokens go on and kcp's
// own controllers finish a namespace deletion; the tenant who created the
// workspace can neither unfreeze it nor delete it nor touch its
// LogicalCluster; the restore annotation freezes with its own reason;
// bad reasons are refused; a freeze survives a restart; unfreezing makes
// writes work again.
func TestFreeze(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		ctx := context.Background()
		const ws = "root:team-a"
		const reason = "incident 4711"

		// The tenant creates team-a (it owns it: cluster-admin inside, and
		// the owner rule lets it edit its Workspace), with no other right
		// in root than creating and reading Workspaces.
		grantClusterRole(t, s, "root", "fz-creator", `{apiGroups: ["tenancy.kcp.io"], resources: ["workspaces"], verbs: ["create", "get", "list", "watch"]}`, "tenant")
		tenantCfg := framework.UserConfig(t, s, "tenant")
		tenantCfg.Host = s.URL() + "/clusters/root"
		tenantDyn, err := dynamic.NewForConfig(tenantCfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tenancy.CreateWorkspace(ctx, tenantDyn, "team-a", "", false, 30*time.Second); err != nil {
			t.Fatalf("the tenant creates its workspace: %v", err)
		}
		tenant := framework.UserClient(t, s, "tenant")

		// What team-a holds: ConfigMaps, a CRD with a custom resource, a
		// ServiceAccount, and a namespace whose deletion is under way,
		// held by a ConfigMap's finalizer.
		admin := s.Client(ws)
		adminDyn, err := dynamic.NewForConfig(s.Config(ws))
		if err != nil {
			t.Fatal(err)
		}
		s.Kubectl(ws, "apply", "-f", framework.WriteFile(t, "crd.yaml", framework.NamespacedCRD("example.com", "widgets", "Widget", `{type: object, x-kubernetes-preserve-unknown-fields: true}`)))
		s.WaitEstablished(ws, "crd/widgets.example.com")
		widgets := adminDyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("default")
		widget := func(name string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget",
				"metadata": map[string]interface{}{"name": name}, "spec": map[string]interface{}{"size": int64(1)}}}
		}
		if _, err := widgets.Create(ctx, widget("w1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cms := admin.CoreV1().ConfigMaps("default")
		for _, n := range []string{"cm1", "cm2"} {
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		s.Kubectl(ws, "create", "serviceaccount", "robot", "-n", "default")
		s.Kubectl(ws, "create", "namespace", "doomed")
		if _, err := admin.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "loose"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := admin.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "doomed's deletion to wait on the held ConfigMap", func() (bool, string) {
			list, err := admin.CoreV1().ConfigMaps("doomed").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(list.Items) == 1 && list.Items[0].Name == "held" && list.Items[0].DeletionTimestamp != nil, fmt.Sprintf("%d configmaps", len(list.Items))
		})
		// Watches opened before the freeze.
		nsList, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nsWatch, err := admin.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{ResourceVersion: nsList.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer nsWatch.Stop()
		cmWatch, err := admin.CoreV1().ConfigMaps("doomed").Watch(ctx, metav1.ListOptions{ResourceVersion: nsList.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer cmWatch.Stop()

		// root's admin freezes team-a with the plugin.
		kc := filepath.Join(t.TempDir(), "config")
		raw, err := os.ReadFile(s.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(kc, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		plugin := func(args ...string) string {
			t.Helper()
			out, err := s.KubectlPlugin(kc, append([]string{"ws"}, args...)...)
			if err != nil {
				t.Fatalf("kubectl ws %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return out
		}
		framework.MustContain(t, "ws freeze", plugin("freeze", "team-a", "--reason", reason), `Workspace "root:team-a" is frozen (read-only): incident 4711`)
		if got := s.Kubectl("root", "get", "workspace", "team-a", "-o", `jsonpath={.status.conditions[?(@.type=="Frozen")].status}/{.status.conditions[?(@.type=="Frozen")].message}`); got != "True/"+reason {
			t.Errorf("the Workspace's Frozen condition: %q", got)
		}
		frozenErr := func(what string, err error, why string) {
			t.Helper()
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the workspace root:team-a is frozen (read-only): "+why) ||
				!strings.Contains(err.Error(), "reads and watches still work") {
				t.Errorf("%s in the frozen workspace: want 403 naming %q, got %v", what, why, err)
			}
		}
		framework.Eventually(t, 30*time.Second, "writes into team-a to be refused", func() (bool, string) {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
			return apierrors.IsForbidden(err), fmt.Sprint(err)
		})
		_ = cms.Delete(ctx, "probe", metav1.DeleteOptions{}) // in case one got through before the freeze took hold

		// Every write is refused, by the admin (system:masters) too.
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
		frozenErr("create configmap", err, reason)
		if err == nil || !strings.Contains(err.Error(), "whoever may update Workspace team-a in root can unfreeze it") {
			t.Errorf("the refusal does not say who can unfreeze: %v", err)
		}
		cm1, err := cms.Get(ctx, "cm1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm1.Data["k"] = "changed"
		_, err = cms.Update(ctx, cm1, metav1.UpdateOptions{})
		frozenErr("update configmap", err, reason)
		_, err = cms.Patch(ctx, "cm1", types.MergePatchType, []byte(`{"data":{"k":"patched"}}`), metav1.PatchOptions{})
		frozenErr("patch configmap", err, reason)
		frozenErr("delete configmap", cms.Delete(ctx, "cm2", metav1.DeleteOptions{}), reason)
		frozenErr("deletecollection configmaps", cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}), reason)
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dry"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		frozenErr("dry-run create", err, reason)
		_, err = widgets.Create(ctx, widget("w2"), metav1.CreateOptions{})
		frozenErr("create widget", err, reason)
		_, err = widgets.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{})
		frozenErr("patch widget", err, reason)
		frozenErr("delete widget", widgets.Delete(ctx, "w1", metav1.DeleteOptions{}), reason)
		_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{})
		frozenErr("create namespace", err, reason)
		frozenErr("delete namespace", admin.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{}), reason)
		if out, err := s.KubectlErr(ws, "", "create", "configmap", "by-kubectl"); err == nil || !strings.Contains(out, "configmaps is forbidden: the workspace root:team-a is frozen (read-only): "+reason) {
			t.Errorf("kubectl create in the frozen workspace: %v\n%s", err, out)
		}
		// ... and by the tenant, who is cluster-admin inside.
		code, body := framework.Do(t, tenant, http.MethodPost, s.URL()+"/clusters/"+ws+"/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"by-tenant"}}`)
		if code != http.StatusForbidden || !strings.Contains(body, reason) || !strings.Contains(body, `"reason":"Forbidden"`) {
			t.Errorf("the tenant's create: %d %s", code, body)
		}

		// Reads go on, and so do access reviews and service-account tokens.
		if got, err := cms.Get(ctx, "cm1", metav1.GetOptions{}); err != nil || got.Data["k"] != "v" {
			t.Errorf("get configmap: %v %v", got, err)
		}
		if list, err := cms.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) < 2 {
			t.Errorf("list configmaps: %v", err)
		}
		if list, err := widgets.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
			t.Errorf("list widgets: %v", err)
		}
		if out := strings.TrimSpace(s.Kubectl(ws, "auth", "can-i", "create", "configmaps")); out != "yes" {
			t.Errorf("kubectl auth can-i: %q", out)
		}
		if out, err := s.KubectlErr(ws, "", "auth", "whoami"); err != nil {
			t.Errorf("kubectl auth whoami: %v\n%s", err, out)
		}
		if tok := strings.TrimSpace(s.Kubectl(ws, "create", "token", "robot", "-n", "default")); strings.Count(tok, ".") != 2 {
			t.Errorf("a service-account token: %q", tok)
		}

		// kcp's own controllers finish the namespace deletion started
		// before the freeze. The held ConfigMap's finalizer is released
		// as a kcp controller would release its own (the server's
		// identity); then the namespace controller deletes the rest and
		// the namespace, and the watches opened before the freeze see it.
		s.Kubectl(ws, "--as=system:apiserver", "--as-group=system:masters", "patch", "configmap", "held", "-n", "doomed", "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
		waitDeleted := func(w watch.Interface, kind, name string) {
			t.Helper()
			timeout := time.After(90 * time.Second)
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatalf("the %s watch opened before the freeze ended", kind)
					}
					if ev.Type == watch.Error {
						t.Fatalf("the %s watch: %v", kind, ev.Object)
					}
					if m, ok := ev.Object.(metav1.Object); ok && ev.Type == watch.Deleted && m.GetName() == name {
						return
					}
				case <-timeout:
					t.Fatalf("the %s watch saw no deletion of %s", kind, name)
				}
			}
		}
		waitDeleted(cmWatch, "configmap", "held")
		waitDeleted(nsWatch, "namespace", "doomed")
		if _, err := admin.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace doomed: %v", err)
		}
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
		frozenErr("create after the deletion", err, reason)

		// The tenant cannot unfreeze: not through its Workspace (the owner
		// rule does not reach spec.frozen), not by deleting it, not
		// through its LogicalCluster.
		wsURL := s.URL() + "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces/team-a"
		merge := map[string]string{"Content-Type": "application/merge-patch+json"}
		code, body = framework.DoWith(t, tenant, http.MethodPatch, wsURL, `{"spec":{"frozen":null}}`, merge)
		if code != http.StatusForbidden || !strings.Contains(body, `may not unfreeze workspace root:team-a`) {
			t.Errorf("the tenant unfreezes its Workspace: %d %s", code, body)
		}
		code, body = framework.DoWith(t, tenant, http.MethodPatch, wsURL, `{"spec":{"frozen":{"reason":"all clear"}}}`, merge)
		if code != http.StatusForbidden {
			t.Errorf("the tenant changes the reason: %d %s", code, body)
		}
		code, body = framework.Do(t, tenant, http.MethodDelete, wsURL, "")
		if code != http.StatusForbidden || !strings.Contains(body, `may not delete workspace root:team-a, which is frozen`) {
			t.Errorf("the tenant deletes its frozen Workspace: %d %s", code, body)
		}
		for _, p := range []string{`{"spec":{"frozen":null}}`, `{"metadata":{"annotations":{"` + tenancy.RestoreAnnotation + `":null}}}`} {
			code, body = framework.DoWith(t, tenant, http.MethodPatch, s.URL()+"/clusters/"+ws+"/apis/tenancy.kcp.io/v1alpha1/logicalclusters/cluster", p, merge)
			if code != http.StatusForbidden {
				t.Errorf("the tenant patches its LogicalCluster with %s: %d %s", p, code, body)
			}
		}
		if got := s.Kubectl("root", "get", "workspace", "team-a", "-o", "jsonpath={.spec.frozen.reason}"); got != reason {
			t.Errorf("spec.frozen.reason is now %q", got)
		}

		// Unfreeze: writes work again, and the condition is gone.
		framework.MustContain(t, "ws unfreeze", plugin("unfreeze", "root:team-a"), `Workspace "root:team-a" is unfrozen`)
		framework.Eventually(t, 30*time.Second, "writes into team-a to work again", func() (bool, string) {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-unfreeze"}}, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err)
		})
		if _, err := widgets.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("patch widget after unfreezing: %v", err)
		}
		if got := s.Kubectl("root", "get", "workspace", "team-a", "-o", `jsonpath={.status.conditions[?(@.type=="Frozen")].status}`); got != "" {
			t.Errorf("the Frozen condition after unfreezing: %q", got)
		}

		// A restore in progress freezes with its own reason: the annotation
		// is set and removed by kcp (here: as the server's identity).
		asServer := []string{"--as=system:apiserver", "--as-group=system:masters"}
		s.Kubectl(ws, append(asServer, "annotate", "logicalcluster", "cluster", tenancy.RestoreAnnotation+"=undo-1")...)
		restoring := "being restored by WorkspaceRestore undo-1 in root"
		framework.Eventually(t, 30*time.Second, "the restore annotation to freeze team-a", func() (bool, string) {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during-restore"}}, metav1.CreateOptions{})
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), restoring), fmt.Sprint(err)
		})
		_, err = cms.Patch(ctx, "cm1", types.MergePatchType, []byte(`{"data":{"k":"patched"}}`), metav1.PatchOptions{})
		frozenErr("patch during a restore", err, restoring)
		code, body = framework.DoWith(t, tenant, http.MethodPatch, s.URL()+"/clusters/"+ws+"/apis/tenancy.kcp.io/v1alpha1/logicalclusters/cluster",
			`{"metadata":{"annotations":{"`+tenancy.RestoreAnnotation+`":null}}}`, merge)
		if code != http.StatusForbidden {
			t.Errorf("the tenant removes the restore annotation: %d %s", code, body)
		}
		s.Kubectl(ws, append(asServer, "annotate", "logicalcluster", "cluster", tenancy.RestoreAnnotation+"-")...)
		framework.Eventually(t, 30*time.Second, "team-a to be writable once the restore ends", func() (bool, string) {
			_, err := cms.Patch(ctx, "cm1", types.MergePatchType, []byte(`{"data":{"k":"after-restore"}}`), metav1.PatchOptions{})
			return err == nil, fmt.Sprint(err)
		})

		// Bad input changes nothing.
		if out, err := s.KubectlPlugin(kc, "ws", "freeze", "team-a"); err == nil || !strings.Contains(out, "--reason is required") {
			t.Errorf("ws freeze without --reason: %v\n%s", err, out)
		}
		if out, err := s.KubectlPlugin(kc, "ws", "freeze", "team-a", "--reason", "  "); err == nil || !strings.Contains(out, "--reason is required") {
			t.Errorf("ws freeze with a blank reason: %v\n%s", err, out)
		}
		for p, want := range map[string]string{
			`{"spec":{"frozen":{"reason":""}}}`:                                 "should be at least 1 chars long",
			`{"spec":{"frozen":{}}}`:                                            "spec.frozen.reason: Required value",
			`{"spec":{"frozen":{"reason":"   "}}}`:                              "must say why the workspace is frozen",
			`{"spec":{"frozen":{"reason":"` + strings.Repeat("x", 257) + `"}}}`: "spec.frozen.reason: Too long",
		} {
			out, err := s.KubectlErr("root", "", "patch", "workspace", "team-a", "--type=merge", "-p", p)
			if err == nil || !strings.Contains(out, want) {
				t.Errorf("patch %.60s: want a refusal saying %q, got %v\n%s", p, want, err, out)
			}
		}
		if got := s.Kubectl("root", "get", "workspace", "team-a", "-o", "jsonpath={.spec.frozen}"); got != "" {
			t.Errorf("spec.frozen after refused input: %q", got)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-bad-input"}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("a write after refused input: %v", err)
		}

		// A freeze survives a restart.
		const reason2 = "legal hold 12"
		framework.MustContain(t, "ws freeze again", plugin("freeze", "root:team-a", "--reason", reason2), reason2)
		framework.Eventually(t, 30*time.Second, "the second freeze to hold", func() (bool, string) {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-restart"}}, metav1.CreateOptions{})
			return apierrors.IsForbidden(err), fmt.Sprint(err)
		})
		s.Stop()
		s.Start()
		admin = s.Client(ws)
		_, err = admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{})
		frozenErr("create after a restart", err, reason2)
		if got := s.Kubectl("root", "get", "workspace", "team-a", "-o", `jsonpath={.status.conditions[?(@.type=="Frozen")].message}`); got != reason2 {
			t.Errorf("the Frozen condition after a restart: %q", got)
		}
		framework.MustContain(t, "ws unfreeze after a restart", plugin("unfreeze", "team-a"), "is unfrozen")
		framework.Eventually(t, 30*time.Second, "writes after unfreezing", func() (bool, string) {
			_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err)
		})
	})
}
