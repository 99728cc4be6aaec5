package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

var (
	restoreCRD = framework.NamespacedCRD("example.com", "widgets", "Widget",
		"{type: object, properties: {spec: {type: object, properties: {size: {type: integer}}}}}")
	widgets     = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	// compared are what a restore is checked on, field by field.
	compared = []schema.GroupVersionResource{
		{Version: "v1", Resource: "namespaces"},
		{Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "secrets"},
		{Version: "v1", Resource: "serviceaccounts"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		crdResource,
		widgets,
	}
	workspaceRestores = schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspacerestores"}
)

// restoreState is every compared object of a cluster by resource and
// namespace/name, without what a restore may change: resourceVersion and
// the time stamps of managedFields.
func restoreState(t *testing.T, s *framework.Server, cluster string) map[string]map[string]interface{} {
	t.Helper()
	d := dynamic.NewForConfigOrDie(s.Config(cluster))
	state := map[string]map[string]interface{}{}
	for _, gvr := range compared {
		list, err := d.Resource(gvr).List(context.Background(), metav1.ListOptions{})
		if apierrors.IsNotFound(err) && gvr == widgets {
			continue // the CRD is gone: no widgets
		}
		if err != nil {
			t.Fatalf("listing %s in %s: %v", gvr.Resource, cluster, err)
		}
		for _, item := range list.Items {
			state[gvr.Resource+" "+item.GetNamespace()+"/"+item.GetName()] = comparable(&item)
		}
	}
	return state
}

func comparable(u *unstructured.Unstructured) map[string]interface{} {
	obj := u.DeepCopy().Object
	unstructured.RemoveNestedField(obj, "metadata", "resourceVersion")
	if mf, ok, _ := unstructured.NestedSlice(obj, "metadata", "managedFields"); ok {
		for _, f := range mf {
			delete(f.(map[string]interface{}), "time")
		}
		_ = unstructured.SetNestedSlice(obj, mf, "metadata", "managedFields")
	}
	return obj
}

// withoutIdentity drops what a copy into another workspace changes: UIDs
// (owner references' too) and the cluster annotation.
func withoutIdentity(state map[string]map[string]interface{}) map[string]map[string]interface{} {
	out := map[string]map[string]interface{}{}
	for k, v := range state {
		u := (&unstructured.Unstructured{Object: v}).DeepCopy()
		unstructured.RemoveNestedField(u.Object, "metadata", "uid")
		unstructured.RemoveNestedField(u.Object, "metadata", "annotations", "kcp.io/cluster")
		if refs, ok, _ := unstructured.NestedSlice(u.Object, "metadata", "ownerReferences"); ok {
			for _, r := range refs {
				delete(r.(map[string]interface{}), "uid")
			}
			_ = unstructured.SetNestedSlice(u.Object, refs, "metadata", "ownerReferences")
		}
		if a := u.GetAnnotations(); len(a) == 0 {
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
		}
		out[k] = u.Object
	}
	return out
}

func diffStates(want, got map[string]map[string]interface{}) []string {
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+k)
		case !reflect.DeepEqual(w, g):
			wj, _ := json.Marshal(w)
			gj, _ := json.Marshal(g)
			diffs = append(diffs, fmt.Sprintf("differs %s:\n  want %s\n  got  %s", k, wj, gj))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "extra "+k)
		}
	}
	sort.Strings(diffs)
	return diffs
}

// waitRestoreFailed waits until a WorkspaceRestore is Failed with a
// message containing want.
func waitRestoreFailed(t *testing.T, restores dynamic.ResourceInterface, name, want string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "WorkspaceRestore "+name+" refused", func() (bool, string) {
		got, err := restores.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
		return phase == "Failed" && strings.Contains(msg, want), phase + ": " + msg
	})
}

// waitCRD waits until a CRD a restore wrote is served, then Established.
func waitCRD(t *testing.T, s *framework.Server, cluster, name string) {
	t.Helper()
	d := dynamic.NewForConfigOrDie(s.Config(cluster)).Resource(crdResource)
	framework.Eventually(t, 30*time.Second, "CRD "+name+" in "+cluster, func() (bool, string) {
		_, err := d.Get(context.Background(), name, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if out, err := s.KubectlErr(cluster, "", "wait", "--for=condition=Established", "--timeout=60s", "crd/"+name); err != nil {
		_, gerr := d.Get(context.Background(), name, metav1.GetOptions{})
		t.Fatalf("waiting for CRD %s in %s to be Established: %v\n%s\n(get now: %v)\n%s", name, cluster, err, out, gerr, s.LogTail(60))
	}
}

func kcpRestore(t *testing.T, s *framework.Server, args ...string) (string, error) {
	t.Helper()
	kcp, _ := framework.Binaries(t)
	out, err := exec.Command(kcp, append([]string{"restore", "--kubeconfig", s.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// TestRestoreWorkspace damages a workspace in several ways and restores it
// to the moment before with `kcp restore`, on both dialects: every object
// comes back field by field, a watch open throughout ends in the restored
// state, another tenant writing meanwhile loses nothing, and what the
// history cannot serve is refused with the earliest point it can.
func TestRestoreWorkspace(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d), "--change-history")
			s.CreateWorkspaces("root:team-a", "root:team-b")
			ctx := context.Background()
			a := "root:team-a"
			if out, err := s.KubectlErr(a, restoreCRD, "apply", "-f", "-"); err != nil {
				t.Fatalf("CRD: %v\n%s", err, out)
			}
			s.WaitEstablished(a, "crd/widgets.example.com")
			s.Kubectl(a, "create", "namespace", "apps")
			s.Kubectl(a, "create", "namespace", "doomed")
			for i := 0; i < 20; i++ {
				s.Kubectl(a, "-n", "apps", "create", "configmap", fmt.Sprintf("cm-%d", i), fmt.Sprintf("--from-literal=v=%d", i))
			}
			s.Kubectl(a, "-n", "doomed", "create", "configmap", "inside", "--from-literal=k=v")
			s.Kubectl(a, "-n", "apps", "create", "secret", "generic", "db", "--from-literal=password=s3cret")
			s.Kubectl(a, "-n", "apps", "create", "serviceaccount", "deployer")
			s.Kubectl(a, "-n", "apps", "create", "role", "reader", "--verb=get,list", "--resource=configmaps")
			s.Kubectl(a, "-n", "apps", "create", "rolebinding", "reader", "--role=reader", "--serviceaccount=apps:deployer")
			if out, err := s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: apps}\nspec: {size: 3}\n", "apply", "-f", "-"); err != nil {
				t.Fatalf("widget: %v\n%s", err, out)
			}
			before := restoreState(t, s, a)
			time.Sleep(1100 * time.Millisecond)
			point := time.Now().UTC()
			time.Sleep(1100 * time.Millisecond)

			// A watch of config maps, from a list, open through damage and restore.
			da := dynamic.NewForConfigOrDie(s.Config(a))
			list, err := da.Resource(compared[1]).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			watched := map[string]map[string]interface{}{}
			for _, item := range list.Items {
				watched["configmaps "+item.GetNamespace()+"/"+item.GetName()] = comparable(&item)
			}
			w, err := da.Resource(compared[1]).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			var watchMu sync.Mutex
			go func() {
				for ev := range w.ResultChan() {
					u, ok := ev.Object.(*unstructured.Unstructured)
					if !ok {
						continue
					}
					k := "configmaps " + u.GetNamespace() + "/" + u.GetName()
					watchMu.Lock()
					if ev.Type == watch.Deleted {
						delete(watched, k)
					} else {
						watched[k] = comparable(u)
					}
					watchMu.Unlock()
				}
			}()

			// The damage.
			s.Kubectl(a, "delete", "namespace", "doomed", "--wait=true", "--timeout=60s")
			for i := 0; i < 20; i++ {
				s.Kubectl(a, "-n", "apps", "patch", "configmap", fmt.Sprintf("cm-%d", i), "--type=merge", "-p", `{"data":{"v":"overwritten"}}`)
			}
			s.Kubectl(a, "delete", "crd", "widgets.example.com", "--wait=true", "--timeout=60s")
			s.Kubectl(a, "-n", "apps", "create", "configmap", "intruder", "--from-literal=x=y")
			s.Kubectl(a, "-n", "apps", "delete", "secret", "db")
			s.Kubectl(a, "-n", "apps", "patch", "role", "reader", "--type=json", "-p", `[{"op":"replace","path":"/rules/0/verbs","value":["*"]}]`)

			// Dry run: lists, writes nothing.
			out, err := kcpRestore(t, s, a, "--to", point.Format(time.RFC3339), "--dry-run")
			if err != nil {
				t.Fatalf("kcp restore --dry-run: %v\n%s", err, out)
			}
			framework.MustContain(t, "the dry run's listing", strings.Join(strings.Fields(out), " "), "configmaps", "customresourcedefinitions.apiextensions.k8s.io", "widgets.example.com",
				"namespaces", "update configmaps apps cm-7", "delete configmaps apps intruder", "create secrets apps db", "create namespaces doomed")
			if _, err := s.Client(a).CoreV1().ConfigMaps("apps").Get(ctx, "intruder", metav1.GetOptions{}); err != nil {
				t.Fatalf("the dry run changed something: %v", err)
			}

			// Side by side: the state at that point in another workspace;
			// the damaged one stays as it is.
			out, err = kcpRestore(t, s, a, "--to", point.Format(time.RFC3339), "--into", "root:team-a-restored")
			if err != nil {
				t.Fatalf("kcp restore --into: %v\n%s\n%s", err, out, s.LogTail(40))
			}
			framework.MustContain(t, "kcp restore --into's output", out, "Workspace team-a-restored created in root", "Succeeded", "into root:team-a-restored")
			waitCRD(t, s, "root:team-a-restored", "widgets.example.com")
			framework.Eventually(t, 30*time.Second, "the copy as the workspace was", func() (bool, string) {
				diffs := diffStates(withoutIdentity(before), withoutIdentity(restoreState(t, s, "root:team-a-restored")))
				return len(diffs) == 0, strings.Join(diffs, "\n")
			})
			if _, err := s.Client(a).CoreV1().ConfigMaps("apps").Get(ctx, "intruder", metav1.GetOptions{}); err != nil {
				t.Fatalf("the restore into another workspace changed the source: %v", err)
			}
			copied, err := s.Client("root:team-a-restored").CoreV1().ConfigMaps("apps").Get(ctx, "cm-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if orig := before["configmaps apps/cm-1"]; copied.UID == "" || string(copied.UID) == orig["metadata"].(map[string]interface{})["uid"] {
				t.Errorf("the copy's config map has the source's UID %s", copied.UID)
			}

			// Another tenant writes all through the restore.
			stop := make(chan struct{})
			var acked []string
			var other sync.WaitGroup
			other.Add(1)
			go func() {
				defer other.Done()
				cb := s.Client("root:team-b").CoreV1().ConfigMaps("default")
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("b-%d", i)
					if _, err := cb.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": name}}, metav1.CreateOptions{}); err == nil {
						acked = append(acked, name)
					}
				}
			}()

			out, err = kcpRestore(t, s, a, "--to", point.Format(time.RFC3339))
			close(stop)
			other.Wait()
			if err != nil {
				t.Fatalf("kcp restore: %v\n%s\n%s", err, out, s.LogTail(40))
			}
			framework.MustContain(t, "kcp restore's output", out, "Succeeded", "restored root:team-a")
			waitCRD(t, s, a, "widgets.example.com")
			framework.Eventually(t, 30*time.Second, "the workspace as it was", func() (bool, string) {
				diffs := diffStates(before, restoreState(t, s, a))
				return len(diffs) == 0, strings.Join(diffs, "\n")
			})
			framework.Eventually(t, 30*time.Second, "the watch brought to the restored state", func() (bool, string) {
				want := map[string]map[string]interface{}{}
				for k, v := range restoreState(t, s, a) {
					if strings.HasPrefix(k, "configmaps ") {
						want[k] = v
					}
				}
				watchMu.Lock()
				defer watchMu.Unlock()
				diffs := diffStates(want, watched)
				return len(diffs) == 0, strings.Join(diffs, "\n")
			})
			// The other tenant's acknowledged writes are all there.
			bl, err := s.Client("root:team-b").CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, cm := range bl.Items {
				have[cm.Name] = true
			}
			for _, name := range acked {
				if !have[name] {
					t.Errorf("team-b's acknowledged config map %s is gone after team-a's restore", name)
				}
			}
			if len(acked) == 0 {
				t.Errorf("team-b wrote nothing during the restore")
			}

			// Refused: before the workspace existed, and an earlier workspace of the same name.
			out, err = kcpRestore(t, s, a, "--revision", "1")
			if err == nil {
				t.Fatalf("a restore to revision 1 succeeded:\n%s", out)
			}
			framework.MustContain(t, "the refusal", out, "was created at revision", "earliest point")
			s.CreateWorkspaces("root:team-c")
			s.Kubectl("root:team-c", "-n", "default", "create", "configmap", "first-life", "--from-literal=a=b")
			time.Sleep(1100 * time.Millisecond)
			firstLife := time.Now().UTC().Format(time.RFC3339)
			time.Sleep(1100 * time.Millisecond)
			s.Kubectl("root", "delete", "workspace", "team-c", "--wait=true", "--timeout=60s")
			s.CreateWorkspaces("root:team-c")
			out, err = kcpRestore(t, s, "root:team-c", "--to", firstLife)
			if err == nil {
				t.Fatalf("a restore into an earlier incarnation succeeded:\n%s", out)
			}
			framework.MustContain(t, "the refusal", out, "an earlier workspace of the same name is not restorable into it")
			if _, err := s.Client("root:team-c").CoreV1().ConfigMaps("default").Get(ctx, "first-life", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the first life's config map is in the new team-c: %v", err)
			}
		})
	}
}

// TestRestoreSecurity: a tenant cannot restore its own workspace without
// rights in the parent, nor reach another workspace through a restore.
func TestRestoreSecurity(t *testing.T) {
	s := framework.StartServer(t, "", "--change-history")
	s.CreateWorkspaces("root:team-a", "root:team-b")
	ctx := context.Background()
	s.Kubectl("root:team-a", "create", "clusterrolebinding", "mallory-admin", "--clusterrole=cluster-admin", "--user=mallory")
	s.GrantAccess("root", "mallory", "team-a")
	cfg := framework.UserConfig(t, s, "mallory")
	restoreOf := func(ws string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "WorkspaceRestore",
			"metadata": map[string]interface{}{"name": "r-" + ws},
			"spec":     map[string]interface{}{"workspace": ws, "revision": int64(1)},
		}}
	}
	as := func(cluster string) dynamic.ResourceInterface {
		c := *cfg
		c.Host = s.URL() + "/clusters/" + cluster
		return dynamic.NewForConfigOrDie(&c).Resource(workspaceRestores)
	}
	// In the parent, where the tenant has no rights.
	for _, ws := range []string{"team-a", "team-b"} {
		if _, err := as("root").Create(ctx, restoreOf(ws), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("mallory created a WorkspaceRestore of %s in root: %v", ws, err)
		}
	}
	// In its own workspace, a restore names a child of that workspace only.
	created, err := as("root:team-a").Create(ctx, restoreOf("team-b"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a WorkspaceRestore in team-a: %v", err)
	}
	waitRestoreFailed(t, as("root:team-a"), created.GetName(), "no Workspace team-b in root:team-a")
	// Bad input is refused with a clear message.
	bad := restoreOf("team-a")
	_ = unstructured.SetNestedField(bad.Object, "2026-11-28T10:41:00Z", "spec", "to")
	if _, err := as("root:team-a").Create(ctx, bad, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "exactly one of spec.to") {
		t.Errorf("a restore with both to and revision: %v", err)
	}
	// The spec cannot change once created.
	got, err := as("root:team-a").Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(got.Object, "team-a", "spec", "workspace")
	if _, err := as("root:team-a").Update(ctx, got, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("changing a WorkspaceRestore's spec: %v", err)
	}
	// Who asked is recorded, and cannot be forged.
	if got.GetAnnotations()["tenancy.kcp.io/owner"] == "" || !strings.Contains(got.GetAnnotations()["tenancy.kcp.io/owner"], "mallory") {
		t.Errorf("the restore's requester record = %q", got.GetAnnotations()["tenancy.kcp.io/owner"])
	}
}

// TestRestoreKilledHalfWay kills kcp (SIGKILL) while a restore writes: the
// workspace stays frozen (its LogicalCluster still names the restore, as
// the datastore shows while kcp is down), and once kcp runs again the
// restore goes on and ends with the workspace exactly as it was.
func TestRestoreKilledHalfWay(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d), "--change-history")
			s.CreateWorkspaces("root:big")
			ctx := context.Background()
			cfg := s.Config("root:big")
			cfg.QPS, cfg.Burst = 500, 1000
			cms := dynamic.NewForConfigOrDie(cfg).Resource(compared[1]).Namespace("default")
			const n = 3000
			parallel(t, n, func(i int) error {
				_, err := cms.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
					"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]interface{}{"name": fmt.Sprintf("cm-%d", i)},
					"data":     map[string]interface{}{"v": fmt.Sprint(i)},
				}}, metav1.CreateOptions{})
				return err
			})
			before := restoreState(t, s, "root:big")
			time.Sleep(1100 * time.Millisecond)
			point := time.Now().UTC().Format(time.RFC3339)
			time.Sleep(1100 * time.Millisecond)
			parallel(t, n, func(i int) error {
				_, err := cms.Patch(ctx, fmt.Sprintf("cm-%d", i), "application/merge-patch+json", []byte(`{"data":{"v":"overwritten"}}`), metav1.PatchOptions{})
				return err
			})
			restores := dynamic.NewForConfigOrDie(s.Config("root")).Resource(workspaceRestores)
			_, err := restores.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "WorkspaceRestore",
				"metadata": map[string]interface{}{"name": "undo"},
				"spec":     map[string]interface{}{"workspace": "big", "to": point},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, 60*time.Second, "the restore writing", func() (bool, string) {
				got, err := restores.Get(ctx, "undo", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				done, _, _ := unstructured.NestedInt64(got.Object, "status", "progress", "done")
				phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
				if phase == "Succeeded" || phase == "Failed" {
					t.Fatalf("the restore ended before it could be killed: %v", got.Object["status"])
				}
				return done > 0, fmt.Sprintf("%s, %d done", phase, done)
			})
			// Frozen while it writes: the tenant's writes are refused.
			_, werr := cms.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]interface{}{"name": "during"},
			}}, metav1.CreateOptions{})
			if !apierrors.IsForbidden(werr) || !strings.Contains(werr.Error(), "being restored by WorkspaceRestore undo") {
				t.Errorf("a write while the restore runs: %v", werr)
			}
			s.Kill()
			db := openDatastore(t, s)
			var lc []byte
			if err := db.QueryRow(`SELECT value FROM kine WHERE name = '/registry/tenancy.kcp.io/logicalclusters/root:big/cluster' ORDER BY id DESC LIMIT 1`).Scan(&lc); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(lc), `"tenancy.kcp.io/restore":"undo"`) {
				t.Errorf("after kill -9 the workspace is not marked as being restored: %s", lc)
			}
			db.Close()
			s.Start()
			framework.Eventually(t, 120*time.Second, "the restore resumed and done", func() (bool, string) {
				got, err := restores.Get(ctx, "undo", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
				msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
				if phase == "Failed" {
					t.Fatalf("the resumed restore failed: %s", msg)
				}
				return phase == "Succeeded", phase + ": " + msg
			})
			if diffs := diffStates(before, restoreState(t, s, "root:big")); len(diffs) > 0 {
				if len(diffs) > 10 {
					diffs = append(diffs[:10], fmt.Sprintf("... %d in all", len(diffs)))
				}
				t.Errorf("after the resumed restore:\n%s", strings.Join(diffs, "\n"))
			}
			lco, err := dynamic.NewForConfigOrDie(s.Config("root:big")).Resource(schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}).Get(ctx, "cluster", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if h := lco.GetAnnotations()["tenancy.kcp.io/restore"]; h != "" {
				t.Errorf("the workspace is still marked as being restored by %s", h)
			}
		})
	}
}

// parallel runs f(0..n-1) on 16 goroutines and fails on the first error.
func parallel(t *testing.T, n int, f func(int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

var workspaceSnapshots = schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspacesnapshots"}

// TestWorkspaceSnapshots: a WorkspaceSnapshot keeps snapshots in the
// datastore (no change history needed) that `kcp restore --snapshot`
// restores from; `kcp snapshot -o FILE` and `kcp restore --from FILE
// --into` copy a workspace through a file; a restore reads only its own
// parent's snapshots; deleting the WorkspaceSnapshot deletes them.
func TestWorkspaceSnapshots(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			s.CreateWorkspaces("root:team-a", "root:team-b", "root:team-b:x")
			ctx := context.Background()
			a := "root:team-a"
			if out, err := s.KubectlErr(a, restoreCRD, "apply", "-f", "-"); err != nil {
				t.Fatalf("CRD: %v\n%s", err, out)
			}
			s.WaitEstablished(a, "crd/widgets.example.com")
			s.Kubectl(a, "create", "namespace", "apps")
			for i := 0; i < 5; i++ {
				s.Kubectl(a, "-n", "apps", "create", "configmap", fmt.Sprintf("cm-%d", i), fmt.Sprintf("--from-literal=v=%d", i))
			}
			s.Kubectl(a, "-n", "apps", "create", "secret", "generic", "db", "--from-literal=password=s3cret")
			if out, err := s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: apps}\nspec: {size: 3}\n", "apply", "-f", "-"); err != nil {
				t.Fatalf("widget: %v\n%s", err, out)
			}
			before := restoreState(t, s, a)
			if out, err := s.KubectlErr("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceSnapshot\nmetadata: {name: nightly}\nspec: {workspace: team-a, every: 1h, keep: 2}\n", "apply", "-f", "-"); err != nil {
				t.Fatalf("WorkspaceSnapshot: %v\n%s", err, out)
			}
			snaps := dynamic.NewForConfigOrDie(s.Config("root")).Resource(workspaceSnapshots)
			framework.Eventually(t, 30*time.Second, "a snapshot taken", func() (bool, string) {
				got, err := snaps.Get(ctx, "nightly", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				list, _, _ := unstructured.NestedSlice(got.Object, "status", "snapshots")
				if len(list) == 0 {
					return false, fmt.Sprint(got.Object["status"])
				}
				objects := list[0].(map[string]interface{})["objects"]
				return fmt.Sprint(objects) != "0", fmt.Sprint(list)
			})
			// Bad input: an interval under a minute.
			if out, err := s.KubectlErr("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceSnapshot\nmetadata: {name: busy}\nspec: {workspace: team-a, every: 10s}\n", "apply", "-f", "-"); err == nil || !strings.Contains(out, "at least 1m") {
				t.Errorf("a WorkspaceSnapshot every 10s: %v\n%s", err, out)
			}

			// The file, while kcp runs.
			kcp, _ := framework.Binaries(t)
			file := t.TempDir() + "/team-a.snap"
			args := []string{"snapshot", a, "-o", file, "--root-dir", s.RootDir}
			if s.Datastore != "" {
				args = append(args, "--datastore", s.Datastore)
			}
			if out, err := exec.Command(kcp, args...).CombinedOutput(); err != nil || !strings.Contains(string(out), "objects of root:team-a at revision") {
				t.Fatalf("kcp snapshot: %v\n%s", err, out)
			}

			// Damage, then restore from the kept snapshot.
			s.Kubectl(a, "-n", "apps", "delete", "configmap", "cm-1")
			s.Kubectl(a, "-n", "apps", "patch", "configmap", "cm-2", "--type=merge", "-p", `{"data":{"v":"overwritten"}}`)
			s.Kubectl(a, "-n", "apps", "create", "configmap", "intruder", "--from-literal=x=y")
			s.Kubectl(a, "delete", "crd", "widgets.example.com", "--wait=true", "--timeout=60s")
			out, err := kcpRestore(t, s, a, "--snapshot", "nightly")
			if err != nil {
				t.Fatalf("kcp restore --snapshot: %v\n%s\n%s", err, out, s.LogTail(30))
			}
			waitCRD(t, s, a, "widgets.example.com")
			framework.Eventually(t, 30*time.Second, "the workspace as in the snapshot", func() (bool, string) {
				diffs := diffStates(before, restoreState(t, s, a))
				return len(diffs) == 0, strings.Join(diffs, "\n")
			})

			// From the file into a new workspace.
			from := []string{"--from", file, "--into", "root:team-a-copy", "--root-dir", s.RootDir}
			if s.Datastore != "" {
				from = append(from, "--datastore", s.Datastore)
			}
			out, err = kcpRestore(t, s, from...)
			if err != nil {
				t.Fatalf("kcp restore --from: %v\n%s\n%s", err, out, s.LogTail(30))
			}
			framework.MustContain(t, "kcp restore --from's output", out, "loaded", "Workspace team-a-copy created in root", "Succeeded")
			waitCRD(t, s, "root:team-a-copy", "widgets.example.com")
			framework.Eventually(t, 30*time.Second, "the copy as in the file", func() (bool, string) {
				diffs := diffStates(withoutIdentity(before), withoutIdentity(restoreState(t, s, "root:team-a-copy")))
				return len(diffs) == 0, strings.Join(diffs, "\n")
			})
			// Bad input: not a snapshot file. Nothing is loaded or written.
			junk := t.TempDir() + "/junk.snap"
			os.WriteFile(junk, []byte(`{"kind":"Something","rows":[]}`), 0o600)
			bad := append([]string{"--from", junk}, from[2:]...)
			if out, err := kcpRestore(t, s, bad...); err == nil || !strings.Contains(out, "not a kcp workspace snapshot") {
				t.Errorf("kcp restore --from a junk file: %v\n%s", err, out)
			}

			// Another parent cannot restore from root's snapshots.
			rb := dynamic.NewForConfigOrDie(s.Config("root:team-b")).Resource(workspaceRestores)
			if _, err := rb.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "WorkspaceRestore",
				"metadata": map[string]interface{}{"name": "steal"},
				"spec":     map[string]interface{}{"workspace": "x", "snapshot": map[string]interface{}{"name": "nightly"}},
			}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitRestoreFailed(t, rb, "steal", "no snapshot of WorkspaceSnapshot nightly in root:team-b")
			if _, err := s.Client("root:team-b:x").CoreV1().Namespaces().Get(ctx, "apps", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("team-a's namespace appeared in root:team-b:x: %v", err)
			}

			// A snapshot listed without all of its rows (as a kill -9 half
			// way through taking one could leave with earlier versions) is
			// refused, not restored as an empty workspace.
			rw, _ := openDatastoreRW(t, s)
			got, err := snaps.Get(ctx, "nightly", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			list, _, _ := unstructured.NestedSlice(got.Object, "status", "snapshots")
			id := list[0].(map[string]interface{})["id"]
			if _, err := rw.Exec(fmt.Sprintf(`DELETE FROM kcp_snapshot_rows WHERE snapshot_id = %v AND key LIKE '%%configmaps%%'`, id)); err != nil {
				t.Fatal(err)
			}
			ra := dynamic.NewForConfigOrDie(s.Config("root")).Resource(workspaceRestores)
			if _, err := ra.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "WorkspaceRestore",
				"metadata": map[string]interface{}{"name": "from-incomplete"},
				"spec":     map[string]interface{}{"workspace": "team-a", "snapshot": map[string]interface{}{"name": "nightly", "id": id}},
			}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitRestoreFailed(t, ra, "from-incomplete", "is incomplete")
			if _, err := s.Client(a).CoreV1().ConfigMaps("apps").Get(ctx, "cm-0", metav1.GetOptions{}); err != nil {
				t.Errorf("cm-0 after a refused restore from an incomplete snapshot: %v", err)
			}

			// Deleting the WorkspaceSnapshot deletes what it kept.
			if err := snaps.Delete(ctx, "nightly", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			db := openDatastore(t, s)
			framework.Eventually(t, 30*time.Second, "the snapshots deleted", func() (bool, string) {
				var n int
				if err := db.QueryRow(`SELECT COUNT(*) FROM kcp_snapshot_rows`).Scan(&n); err != nil {
					return false, err.Error()
				}
				_, err := snaps.Get(ctx, "nightly", metav1.GetOptions{})
				return n == 0 && apierrors.IsNotFound(err), fmt.Sprintf("%d rows left, %v", n, err)
			})
		})
	}
}

// TestRestoreRefusedPastHistory: without the change history, and past its
// retention, a restore is refused with a message that says why and, when
// there is one, the earliest point it can restore to; nothing is written.
func TestRestoreRefusedPastHistory(t *testing.T) {
	t.Run("history off", func(t *testing.T) {
		s := framework.StartServer(t, "")
		s.CreateWorkspaces("root:team-a")
		out, err := kcpRestore(t, s, "root:team-a", "--to", "1m")
		if err == nil {
			t.Fatalf("a restore without the change history succeeded:\n%s", out)
		}
		framework.MustContain(t, "the refusal", out, "Failed", "the change history is off (kcp start --change-history records it)")
	})
	t.Run("past the retention", func(t *testing.T) {
		s := framework.StartServer(t, "", "--change-history", "--change-history-retention=5s")
		s.CreateWorkspaces("root:team-a")
		s.Kubectl("root:team-a", "-n", "default", "create", "configmap", "kept", "--from-literal=v=1")
		time.Sleep(1100 * time.Millisecond)
		point := time.Now().UTC().Format(time.RFC3339)
		time.Sleep(1100 * time.Millisecond)
		s.Kubectl("root:team-a", "-n", "default", "patch", "configmap", "kept", "--type=merge", "-p", `{"data":{"v":"2"}}`)
		time.Sleep(8 * time.Second) // the rows of the point and of the patch are pruned
		s.Kubectl("root:team-a", "-n", "default", "create", "configmap", "later", "--from-literal=v=1")
		out, err := kcpRestore(t, s, "root:team-a", "--to", point)
		if err == nil {
			t.Fatalf("a restore past the retention succeeded:\n%s", out)
		}
		framework.MustContain(t, "the refusal", out, "Failed", "the change history reaches back to revision", "earliest point")
		if got := s.Kubectl("root:team-a", "-n", "default", "get", "configmap", "kept", "-o", "jsonpath={.data.v}"); got != "2" {
			t.Errorf("the refused restore changed kept: v=%q", got)
		}
	})
}

// TestRestoreRecursive: --recursive restores a workspace and the
// workspaces below it to one point; a workspace created after that point
// is left as it is (restores never create or delete workspaces).
func TestRestoreRecursive(t *testing.T) {
	s := framework.StartServer(t, "", "--change-history")
	s.CreateWorkspaces("root:org", "root:org:team", "root:org:team:app")
	for _, c := range []string{"root:org", "root:org:team", "root:org:team:app"} {
		s.Kubectl(c, "-n", "default", "create", "configmap", "settings", "--from-literal=v=good")
	}
	time.Sleep(1100 * time.Millisecond)
	point := time.Now().UTC().Format(time.RFC3339)
	time.Sleep(1100 * time.Millisecond)
	for _, c := range []string{"root:org", "root:org:team", "root:org:team:app"} {
		s.Kubectl(c, "-n", "default", "patch", "configmap", "settings", "--type=merge", "-p", `{"data":{"v":"bad"}}`)
	}
	s.CreateWorkspaces("root:org:late")
	s.Kubectl("root:org:late", "-n", "default", "create", "configmap", "settings", "--from-literal=v=late")
	out, err := kcpRestore(t, s, "root:org", "--to", point, "--recursive", "--dry-run")
	if err != nil {
		t.Fatalf("kcp restore --recursive --dry-run: %v\n%s", err, out)
	}
	framework.MustContain(t, "the dry run", strings.Join(strings.Fields(out), " "), "update configmaps default settings root:org:team:app", "and 2 workspaces below it", "root:org:late")
	out, err = kcpRestore(t, s, "root:org", "--to", point, "--recursive")
	if err != nil {
		t.Fatalf("kcp restore --recursive: %v\n%s\n%s", err, out, s.LogTail(30))
	}
	framework.MustContain(t, "kcp restore's output", out, "Succeeded", "and 2 workspaces below it")
	for c, want := range map[string]string{"root:org": "good", "root:org:team": "good", "root:org:team:app": "good", "root:org:late": "late"} {
		if got := s.Kubectl(c, "-n", "default", "get", "configmap", "settings", "-o", "jsonpath={.data.v}"); got != want {
			t.Errorf("%s: settings v=%q, want %q", c, got, want)
		}
	}
	// Bad input: recursive with into.
	if out, err := kcpRestore(t, s, "root:org", "--to", point, "--recursive", "--into", "root:org2"); err == nil || !strings.Contains(out, "cannot be combined with --into") {
		t.Errorf("--recursive --into: %v\n%s", err, out)
	}
	if _, err := s.KubectlErr("root", "", "get", "workspace", "org2"); err == nil {
		t.Errorf("a refused restore created a workspace")
	}
}
