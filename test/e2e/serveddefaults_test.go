package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestServedDefaults: every namespace's service account "default" and
// config map "kube-root-ca.crt" are served, not stored
// (storage/serveddefaults). A client must not be able to tell: they list
// with continue tokens across stored and served ones, update (the first
// update is a MODIFIED of the served object, seen by a watch from before
// it), delete (the controller re-creates them), go with their namespace,
// and read the same after a restart.
func TestServedDefaults(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		const ws = "root:served"
		s.CreateWorkspaces(ws)
		ctx := context.Background()
		c := s.Client(ws)
		// Names whose keys sort differently from the namespaces'.
		for _, n := range []string{"a", "a-b", "a-b-c", "b"} {
			s.Kubectl(ws, "create", "namespace", n)
		}
		s.Kubectl(ws, "-n", "a-b", "create", "serviceaccount", "builder")
		want := []string{"a-b-c/default", "a-b/builder", "a-b/default", "a/default", "b/default", "default/default", "kube-public/default", "kube-system/default"}
		sort.Strings(want)

		list := func(limit int64) ([]string, *corev1.ServiceAccountList) {
			var got []string
			var first *corev1.ServiceAccountList
			opts := metav1.ListOptions{Limit: limit}
			for {
				l, err := c.CoreV1().ServiceAccounts("").List(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = l
				}
				for _, sa := range l.Items {
					got = append(got, sa.Namespace+"/"+sa.Name)
				}
				if l.Continue == "" {
					break
				}
				opts.Continue = l.Continue
			}
			sort.Strings(got)
			return got, first
		}
		got, whole := list(0)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("service accounts:\n got %v\nwant %v", got, want)
		}
		for _, limit := range []int64{1, 2, 3} {
			if got, _ := list(limit); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("in pages of %d:\n got %v\nwant %v", limit, got, want)
			}
		}
		if out := s.Kubectl(ws, "get", "configmaps", "-A", "--chunk-size=1", "-o", "name"); strings.Count(out, "configmap/kube-root-ca.crt") != 7 {
			t.Errorf("kubectl in chunks of 1 lists kube-root-ca.crt %d times, want 7:\n%s", strings.Count(out, "configmap/kube-root-ca.crt"), out)
		}
		// An exact read at the list's resourceVersion (etcd, not the cache).
		if _, err := c.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{ResourceVersion: whole.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 2}); err != nil {
			t.Errorf("an exact list at the list's resourceVersion: %v", err)
		}
		uidOf := map[string]types.UID{}
		for _, sa := range whole.Items {
			uidOf[sa.Namespace] = sa.UID
			if sa.Annotations["kcp.io/cluster"] != ws || sa.UID == "" || sa.CreationTimestamp.IsZero() {
				t.Errorf("%s/%s: cluster %q, uid %q, created %v", sa.Namespace, sa.Name, sa.Annotations["kcp.io/cluster"], sa.UID, sa.CreationTimestamp)
			}
		}

		// Watch from the list, and again from the same revision later.
		w, err := c.CoreV1().ServiceAccounts("").Watch(ctx, metav1.ListOptions{ResourceVersion: whole.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		next := func(w watch.Interface, what string) (watch.EventType, *corev1.ServiceAccount) {
			t.Helper()
			for {
				select {
				case e, ok := <-w.ResultChan():
					if !ok {
						t.Fatalf("watch ended waiting for %s", what)
					}
					if e.Type == watch.Bookmark {
						continue
					}
					sa, ok := e.Object.(*corev1.ServiceAccount)
					if !ok {
						t.Fatalf("waiting for %s: %v %#v", what, e.Type, e.Object)
					}
					return e.Type, sa
				case <-time.After(30 * time.Second):
					t.Fatalf("no watch event: waiting for %s", what)
				}
			}
		}

		// The first update of a served default.
		patched, err := c.CoreV1().ServiceAccounts("a").Patch(ctx, "default", types.MergePatchType, []byte(`{"imagePullSecrets":[{"name":"registry"}]}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if patched.UID != uidOf["a"] {
			t.Errorf("an update changed the UID: %s -> %s", uidOf["a"], patched.UID)
		}
		if typ, sa := next(w, "the update"); typ != watch.Modified || sa.Namespace != "a" || len(sa.ImagePullSecrets) != 1 {
			t.Errorf("the first update of a served default shows as %s %s/%s %v", typ, sa.Namespace, sa.Name, sa.ImagePullSecrets)
		}
		// An update with the served object's old resourceVersion conflicts.
		stale := whole.Items[0].DeepCopy()
		for _, sa := range whole.Items {
			if sa.Namespace == "a" {
				stale = sa.DeepCopy()
			}
		}
		stale.Labels = map[string]string{"x": "y"}
		if _, err := c.CoreV1().ServiceAccounts("a").Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Errorf("an update at the served resourceVersion after the first write: %v, want a conflict", err)
		}
		// A watch from before the first write sees it too.
		w2, err := c.CoreV1().ServiceAccounts("a").Watch(ctx, metav1.ListOptions{ResourceVersion: whole.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		if typ, sa := next(w2, "the update, from before it"); typ != watch.Modified || len(sa.ImagePullSecrets) != 1 {
			t.Errorf("a watch from before the first write shows %s %v", typ, sa.ImagePullSecrets)
		}
		w2.Stop()

		// Delete: gone, then re-created by kcp with a new UID.
		if err := c.CoreV1().ServiceAccounts("a-b").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if typ, sa := next(w, "the delete"); typ != watch.Deleted || sa.Namespace != "a-b" || sa.Name != "default" {
			t.Errorf("the delete shows as %s %s/%s", typ, sa.Namespace, sa.Name)
		}
		if typ, sa := next(w, "the re-create"); typ != watch.Added || sa.Namespace != "a-b" || sa.UID == uidOf["a-b"] {
			t.Errorf("the re-create shows as %s %s/%s %s", typ, sa.Namespace, sa.Name, sa.UID)
		}
		// A namespace's deletion takes its defaults.
		s.Kubectl(ws, "delete", "namespace", "b")
		if typ, sa := next(w, "the namespace's deletion"); typ != watch.Deleted || sa.Namespace != "b" {
			t.Errorf("the namespace's deletion shows as %s %s/%s", typ, sa.Namespace, sa.Name)
		}
		framework.Eventually(t, 30*time.Second, "namespace b gone", func() (bool, string) {
			_, err := c.CoreV1().Namespaces().Get(ctx, "b", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if _, err := c.CoreV1().ServiceAccounts("b").Get(ctx, "default", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the default of a deleted namespace: %v", err)
		}
		// Another workspace does not see any of it.
		s.CreateWorkspaces("root:served-other")
		if out := s.Kubectl("root:served-other", "get", "serviceaccounts", "-A", "-o", "name"); strings.Count(out, "serviceaccount/") != 3 {
			t.Errorf("another workspace lists:\n%s", out)
		}

		// After a restart the same objects read the same.
		before := map[string]corev1.ServiceAccount{}
		_, l := list(0)
		for _, sa := range l.Items {
			before[sa.Namespace+"/"+sa.Name] = sa
		}
		// From the watch cache too (resourceVersion 0), whole objects: the
		// cache was filled from the events of this run; after the restart
		// it is filled by reading the datastore in-process (served
		// defaults as objects, stored ones decoded), which must give the
		// same objects, byte for byte once encoded.
		cached := cachedDefaults(t, c)
		w.Stop()
		s.Stop()
		s.Start()
		c = s.Client(ws)
		framework.Eventually(t, 30*time.Second, "the watch cache after the restart holds what it held before", func() (bool, string) {
			after := cachedDefaults(t, c)
			if len(after) != len(cached) {
				return false, fmt.Sprintf("%d objects, before %d", len(after), len(cached))
			}
			for k, b := range cached {
				if after[k] != b {
					return false, fmt.Sprintf("%s after the restart:\n%s\nbefore:\n%s", k, after[k], b)
				}
			}
			return true, ""
		})
		c2, err := kubernetes.NewForConfig(s.Config(ws))
		if err != nil {
			t.Fatal(err)
		}
		l2, err := c2.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l2.Items) != len(before) {
			t.Errorf("after a restart %d service accounts, before %d", len(l2.Items), len(before))
		}
		for _, sa := range l2.Items {
			b := before[sa.Namespace+"/"+sa.Name]
			if b.UID != sa.UID || b.ResourceVersion != sa.ResourceVersion || len(b.ImagePullSecrets) != len(sa.ImagePullSecrets) {
				t.Errorf("%s/%s after a restart: uid %s rv %s, before uid %s rv %s", sa.Namespace, sa.Name, sa.UID, sa.ResourceVersion, b.UID, b.ResourceVersion)
			}
		}
	})
}

// cachedDefaults reads the service accounts, config maps,
// ClusterRoleBindings and namespaces of c's workspace from the watch cache
// (resourceVersion 0), as JSON by kind and namespace/name.
func cachedDefaults(t *testing.T, c kubernetes.Interface) map[string]string {
	t.Helper()
	ctx := context.Background()
	rv0 := metav1.ListOptions{ResourceVersion: "0"}
	out := map[string]string{}
	add := func(kind string, items any) {
		v := reflect.ValueOf(items)
		for i := 0; i < v.Len(); i++ {
			o := v.Index(i).Addr().Interface().(metav1.Object)
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			out[kind+" "+o.GetNamespace()+"/"+o.GetName()] = string(b)
		}
	}
	sas, err := c.CoreV1().ServiceAccounts("").List(ctx, rv0)
	if err != nil {
		t.Fatal(err)
	}
	add("serviceaccount", sas.Items)
	cms, err := c.CoreV1().ConfigMaps("").List(ctx, rv0)
	if err != nil {
		t.Fatal(err)
	}
	add("configmap", cms.Items)
	crbs, err := c.RbacV1().ClusterRoleBindings().List(ctx, rv0)
	if err != nil {
		t.Fatal(err)
	}
	add("clusterrolebinding", crbs.Items)
	// The namespaces too (their managed fields included): the server's
	// namespace informer starts from the objects of this cache's fill and
	// trims its own copies.
	nss, err := c.CoreV1().Namespaces().List(ctx, rv0)
	if err != nil {
		t.Fatal(err)
	}
	add("namespace", nss.Items)
	if len(sas.Items) == 0 || len(cms.Items) == 0 || len(crbs.Items) == 0 || len(nss.Items) == 0 {
		t.Fatalf("%d service accounts, %d config maps, %d ClusterRoleBindings, %d namespaces: the defaults are missing", len(sas.Items), len(cms.Items), len(crbs.Items), len(nss.Items))
	}
	return out
}
