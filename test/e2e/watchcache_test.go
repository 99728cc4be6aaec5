package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWatchCacheIsolation tries to read another cluster's objects through
// every way a request reaches the watch cache (one cache per resource holds
// all clusters): lists and gets at a resource version, watches from "0",
// pages and continue tokens, selectors, clusters whose names are prefixes of
// each other, and an object whose client claims another cluster in its
// kcp.io/cluster annotation. It runs with the cache (the default) and
// without, where the same rules hold.
func TestWatchCacheIsolation(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
	}{{"cached", nil}, {"uncached", []string{"--watch-cache=false"}}} {
		t.Run(mode.name, func(t *testing.T) {
			s := framework.StartServer(t, "", mode.args...)
			watchCacheIsolation(t, s, mode.args == nil)
		})
	}
}

func watchCacheIsolation(t *testing.T, s *framework.Server, cached bool) {
	ctx := context.Background()
	a, b, bb := "root:team-a", "root:team-b", "root:team-bb"
	s.CreateWorkspaces(a, b, bb)
	secret := "s3cr3t-of-team-b"
	for _, c := range []string{b, bb} {
		createNamespace(t, s, c, "vault")
		for i := 0; i < 3; i++ {
			if _, err := s.Client(c).CoreV1().Secrets("vault").Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("key-%d", i), Namespace: "vault"},
				StringData: map[string]string{"k": secret + "-" + c}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// team-a writes a config map claiming to be team-b's, in a namespace
	// team-b also has.
	createNamespace(t, s, a, "vault")
	forged, err := s.Client(a).CoreV1().ConfigMaps("vault").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "vault", Annotations: map[string]string{clusterAnnotation: b}},
		Data:       map[string]string{"from": a}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := forged.Annotations[clusterAnnotation]; got != a {
		t.Fatalf("the server kept a client's %s annotation: %q", clusterAnnotation, got)
	}
	// Changing it later is refused with a message, not accepted and ignored
	// (kubectl annotate used to print "annotated").
	if out, err := s.KubectlErr(a, "", "-n", "vault", "annotate", "--overwrite", "configmap", "forged", clusterAnnotation+"="+b); err == nil || !strings.Contains(out, "cannot be changed") {
		t.Errorf("kubectl annotate %s=%s: want a refusal, got %v:\n%s", clusterAnnotation, b, err, out)
	}
	if got, err := s.Client(a).CoreV1().ConfigMaps("vault").Get(ctx, "forged", metav1.GetOptions{}); err != nil || got.Annotations[clusterAnnotation] != a {
		t.Errorf("after the refused annotate: %v, annotation %q", err, got.Annotations[clusterAnnotation])
	}

	admin := framework.UserClient(t, s, "admin-2", "system:masters")
	u := s.URL()
	list := func(cluster, path string, q url.Values) (int, []metav1.ObjectMeta, string) {
		t.Helper()
		code, body := framework.Do(t, admin, "GET", u+"/clusters/"+cluster+path+"?"+q.Encode(), "")
		var l struct {
			Metadata metav1.ListMeta `json:"metadata"`
			Items    []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if code == 200 {
			if err := json.Unmarshal([]byte(body), &l); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
		}
		var items []metav1.ObjectMeta
		for _, i := range l.Items {
			items = append(items, i.Metadata)
		}
		return code, items, l.Metadata.Continue
	}
	onlyCluster := func(what, cluster string, items []metav1.ObjectMeta) {
		t.Helper()
		for _, m := range items {
			if got := m.Annotations[clusterAnnotation]; got != cluster {
				t.Errorf("%s in %s returned %s/%s of %s", what, cluster, m.Namespace, m.Name, got)
			}
		}
	}
	rvs := []url.Values{
		{},
		{"resourceVersion": {"0"}},
		{"resourceVersion": {"1"}, "resourceVersionMatch": {"NotOlderThan"}},
		{"resourceVersion": {"0"}, "labelSelector": {"!nothing"}},
		{"resourceVersion": {"0"}, "fieldSelector": {"metadata.namespace=vault"}},
	}
	for _, q := range rvs {
		// team-a has the namespace but no secrets; team-b has three, and
		// team-bb, whose name extends team-b's, three more.
		for _, path := range []string{"/api/v1/secrets", "/api/v1/namespaces/vault/secrets"} {
			code, items, _ := list(a, path, q)
			if code != 200 || len(items) != 0 {
				t.Errorf("list %s%s?%s: %d, %d objects, want 200 and none", a, path, q.Encode(), code, len(items))
			}
			code, items, _ = list(b, path, q)
			if code != 200 || len(items) != 3 {
				t.Errorf("list %s%s?%s: %d, %d objects, want 200 and 3", b, path, q.Encode(), code, len(items))
			}
			onlyCluster("list "+path+"?"+q.Encode(), b, items)
		}
		code, items, _ := list(b, "/api/v1/namespaces/vault/configmaps", q)
		if code != 200 {
			t.Errorf("list config maps in %s: %d", b, code)
		}
		onlyCluster("list config maps", b, items)
		for _, m := range items {
			if m.Name == "forged" {
				t.Errorf("%s's forged config map is listed in %s", a, b)
			}
		}
	}
	// Gets at a resource version are served from the cache.
	for _, rv := range []string{"", "0"} {
		q := "?resourceVersion=" + rv
		if code, body := framework.Do(t, admin, "GET", u+"/clusters/"+a+"/api/v1/namespaces/vault/secrets/key-0"+q, ""); code != 404 || strings.Contains(body, secret) {
			t.Errorf("get of team-b's secret name in %s%s: %d %s", a, q, code, body)
		}
		if code, body := framework.Do(t, admin, "GET", u+"/clusters/"+b+"/api/v1/namespaces/vault/configmaps/forged"+q, ""); code != 404 {
			t.Errorf("get of the forged config map in %s%s: %d %s", b, q, code, body)
		}
		code, body := framework.Do(t, admin, "GET", u+"/clusters/"+b+"/api/v1/namespaces/vault/secrets/key-0"+q, "")
		if code != 200 || !strings.Contains(body, `"kcp.io/cluster":"`+b+`"`) {
			t.Errorf("get in %s%s: %d %s", b, q, code, body)
		}
	}

	// Pages: a continue token from team-b's list, replayed in team-a and
	// in team-bb, continues in the cluster of the request only.
	for _, q := range []url.Values{{"limit": {"1"}}, {"limit": {"1"}, "resourceVersion": {"0"}}} {
		code, items, cont := list(b, "/api/v1/secrets", q)
		onlyCluster("first page", b, items)
		if cont == "" {
			// resourceVersion=0 may serve the whole list, ignoring the limit
			if code != 200 || len(items) != 3 {
				t.Errorf("unpaged list in %s?%s: %d, %d objects, want 3", b, q.Encode(), code, len(items))
			}
			continue
		}
		if code != 200 || len(items) != 1 {
			t.Fatalf("first page in %s: %d, %d objects", b, code, len(items))
		}
		var all []metav1.ObjectMeta
		for next := cont; next != ""; {
			code, page, c := list(b, "/api/v1/secrets", url.Values{"limit": {"1"}, "continue": {next}})
			if code != 200 {
				t.Fatalf("next page in %s: %d", b, code)
			}
			all, next = append(all, page...), c
		}
		onlyCluster("pages", b, all)
		if len(all) != 2 {
			t.Errorf("pages after the first in %s: %d objects, want 2", b, len(all))
		}
		for _, other := range []string{a, bb} {
			code, page, _ := list(other, "/api/v1/secrets", url.Values{"limit": {"5"}, "continue": {cont}})
			if code == 200 {
				onlyCluster("replayed continue token", other, page)
			}
		}
	}

	// Workspaces, kcp's own resource, are served in every cluster by one
	// store (from the datastore, not the cache): team-b and team-bb each
	// get a child workspace of the same name, team-a none.
	s.CreateWorkspaces(b+":shared", bb+":shared")
	wsPath := "/apis/tenancy.kcp.io/v1alpha1/workspaces"
	for _, q := range rvs[:3] {
		for c, want := range map[string]int{a: 0, b: 1, bb: 1} {
			code, items, _ := list(c, wsPath, q)
			if code != 200 || len(items) != want {
				t.Errorf("list workspaces in %s?%s: %d, %d objects, want 200 and %d", c, q.Encode(), code, len(items), want)
			}
			onlyCluster("list workspaces?"+q.Encode(), c, items)
		}
		if code, body := framework.Do(t, admin, "GET", u+"/clusters/"+a+wsPath+"/shared?"+q.Encode(), ""); code != 404 {
			t.Errorf("get of another cluster's workspace name in %s?%s: %d %s", a, q.Encode(), code, body)
		}
	}

	// A watch from "0" starts with the cache's objects: team-b's only,
	// then its own events only, whatever team-bb and team-a write.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := s.Client(b).CoreV1().Secrets("").Watch(wctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, c := range []string{bb, a, b} {
		if _, err := s.Client(c).CoreV1().Secrets("vault").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "vault"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for !seen["late"] {
		select {
		case ev := <-w.ResultChan():
			sec, ok := ev.Object.(*corev1.Secret)
			if !ok {
				t.Fatalf("unexpected event %v", ev)
			}
			if got := sec.Annotations[clusterAnnotation]; got != b {
				t.Fatalf("watch from 0 in %s received %s/%s of %s", b, sec.Namespace, sec.Name, got)
			}
			seen[sec.Name] = true
		case <-wctx.Done():
			t.Fatalf("watch in %s saw only %v", b, seen)
		}
	}
	if len(seen) != 4 {
		t.Errorf("watch from 0 in %s saw %v, want key-0..2 and late", b, seen)
	}
	w.Stop()

	// The requests above went through the cache, or not at all.
	metrics := s.Kubectl("root", "get", "--raw", "/metrics")
	for _, gr := range []string{`group="",resource="secrets"`} {
		served := strings.Contains(metrics, `apiserver_watch_cache_consistent_read_total{fallback="false",`+gr+`,success="true"}`)
		if served != cached {
			t.Errorf("consistent reads of %s served from the watch cache: %v, want %v", gr, served, cached)
		}
	}

	// After a restart the cache fills itself from the datastore, and objects
	// of the same name in different clusters must all be there: every
	// cluster's "default" namespace, every LogicalCluster "cluster". (The
	// cache's reflector once streamed its initial state into a store keyed
	// by namespace and name, and kept one object of each name.)
	s.Stop()
	s.Start()
	clusters := []string{"root", a, b, bb, b + ":shared", bb + ":shared"}
	for _, q := range rvs[:3] {
		for _, gr := range []struct{ path, name string }{
			{"/api/v1/namespaces", "default"},
			{"/apis/tenancy.kcp.io/v1alpha1/logicalclusters", "cluster"},
		} {
			code, items, _ := list("*", gr.path, q)
			found := map[string]bool{}
			for _, m := range items {
				if m.Name == gr.name {
					found[m.Annotations[clusterAnnotation]] = true
				}
			}
			for _, c := range clusters {
				if c != "root" || gr.name == "default" {
					if code != 200 || !found[c] {
						t.Errorf("after a restart, list of all clusters' %s?%s: %d, %s of %s missing (found %v)", gr.path, q.Encode(), code, gr.name, c, found)
					}
				}
			}
		}
		for _, c := range clusters {
			code, items, _ := list(c, "/api/v1/namespaces", q)
			names := map[string]bool{}
			for _, m := range items {
				names[m.Name] = true
			}
			if code != 200 || !names["default"] {
				t.Errorf("after a restart, namespaces of %s?%s: %d, %v", c, q.Encode(), code, names)
			}
			onlyCluster("namespaces after a restart", c, items)
		}
	}
	for c, want := range map[string]int{a: 0, b: 1, bb: 1} {
		code, items, _ := list(c, wsPath, url.Values{"resourceVersion": {"0"}})
		if code != 200 || len(items) != want {
			t.Errorf("after a restart, workspaces in %s: %d, %d objects, want %d", c, code, len(items), want)
		}
		onlyCluster("workspaces after a restart", c, items)
	}
	s.Kubectl(b+":shared", "get", "namespaces") // the registry knows every cluster again
}

// TestWatchCacheSharedMaps: the watch cache shares equal small maps between
// objects (every object of a cluster has the same annotations, every
// cluster's "default" namespace the same labels, every kube-root-ca.crt the
// same data). Changing one object must change that object only, in every
// way a client reads it (a get and a list at resource version 0, served by
// the cache, and a watch), whether the cache got the objects from its
// watch or from its first list after a restart.
func TestWatchCacheSharedMaps(t *testing.T) {
	ctx := context.Background()
	s := framework.StartServer(t, "")
	a, b := "root:share-a", "root:share-b"
	s.CreateWorkspaces(a, b)
	for _, c := range []string{a, b} {
		if _, err := s.Client(c).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "same", Labels: map[string]string{"app": "x"}},
			Data:       map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cached := metav1.GetOptions{ResourceVersion: "0"}
	labelled := map[string]bool{}
	check := func(phase, changed, other, ns string) {
		t.Helper()
		// The change took in the changed cluster...
		framework.Eventually(t, 30*time.Second, phase+": the change in "+changed, func() (bool, string) {
			n, err := s.Client(changed).CoreV1().Namespaces().Get(ctx, ns, cached)
			if err != nil {
				return false, err.Error()
			}
			cm, err := s.Client(changed).CoreV1().ConfigMaps(ns).Get(ctx, "same", cached)
			if err != nil {
				return false, err.Error()
			}
			return n.Labels["changed"] == "yes" && cm.Data["k"] == "changed" && cm.Labels["app"] == "y", fmt.Sprintf("%v %v %v", n.Labels, cm.Labels, cm.Data)
		})
		// ...and in no other object.
		for _, c := range []string{changed, other} {
			for _, n := range []string{"default", "kube-system", "kube-public"} {
				if labelled[c+"/"+n] {
					continue
				}
				got, err := s.Client(c).CoreV1().Namespaces().Get(ctx, n, cached)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := got.Labels["changed"]; ok || got.Labels["kubernetes.io/metadata.name"] != n {
					t.Errorf("%s: labelling namespace %s of %s changed namespace %s of %s: %v", phase, ns, changed, n, c, got.Labels)
				}
			}
		}
		l, err := s.Client(other).CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range l.Items {
			if cm.Annotations[clusterAnnotation] != other || cm.Data["k"] == "changed" || cm.Labels["app"] == "y" {
				t.Errorf("%s: %s/%s of %s after changing %s: annotations %v labels %v data %v", phase, cm.Namespace, cm.Name, other, changed, cm.Annotations, cm.Labels, cm.Data)
			}
		}
		w, err := s.Client(other).CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for seen := 0; seen < 2; {
			select {
			case e := <-w.ResultChan():
				cm, ok := e.Object.(*corev1.ConfigMap)
				if !ok {
					t.Fatalf("%s: watch event %v", phase, e)
				}
				seen++
				if cm.Data["k"] == "changed" || cm.Labels["app"] == "y" {
					t.Errorf("%s: the watch of %s shows %s's change: %v %v", phase, other, changed, cm.Labels, cm.Data)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: the watch of %s/%s delivered %d of its 2 config maps", phase, other, ns, seen)
			}
		}
	}
	change := func(cluster, ns string) {
		t.Helper()
		if _, err := s.KubectlErr(cluster, "", "label", "namespace", ns, "changed=yes"); err != nil {
			t.Fatal(err)
		}
		labelled[cluster+"/"+ns] = true
		if ns != "default" {
			if _, err := s.Client(cluster).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "same", Labels: map[string]string{"app": "x"}},
				Data:       map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := s.KubectlErr(cluster, "", "-n", ns, "patch", "configmap", "same", "--type=merge", "-p", `{"metadata":{"labels":{"app":"y"}},"data":{"k":"changed"}}`); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	// Objects the cache got from its watch.
	change(a, "default")
	check("before a restart", a, b, "default")
	// Objects the cache got from its first list.
	s.Stop()
	s.Start()
	if _, err := s.Client(b).CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "same", Labels: map[string]string{"app": "x"}},
		Data:       map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	change(a, "kube-system")
	check("after a restart", a, b, "kube-system")

	// The caches filled themselves without one gRPC message holding every
	// object of a resource, which at a million workspaces would pass
	// gRPC's 2 GiB limit: the config maps and namespaces in-process (no
	// etcd list at all: storage/serveddefaults' ListObjects), the rest
	// with a streamed read (etcd RangeStream, which the embedded kine
	// serves in pieces of about 1.5 MiB).
	metrics, err := s.Client("root").Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lists := grepLines(string(metrics), "apiserver_storage_list_duration_seconds_count")
	for _, r := range []string{"configmaps", "namespaces", "secrets"} {
		if strings.Contains(lists, `{group="",resource="`+r+`",streamed="false"}`) {
			t.Errorf("%s were read by an unstreamed list; list metrics:\n%s", r, lists)
		}
	}
	if !strings.Contains(lists, `{group="",resource="secrets",streamed="true"}`) {
		t.Errorf("the secrets' cache was not filled by a streamed read; list metrics:\n%s", lists)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
