// Package shards tests an installation of several shards (kcp start
// --shards-file) behind front proxies (kcp front-proxy): each on a database
// of its own, one SQLite and one PostgreSQL, with the real binaries,
// kubectl and client-go.
package shards

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

func TestShardsBehindFrontProxy(t *testing.T) {
	in := framework.StartShards(t, []string{"", framework.DatastoreFor(t, framework.Postgres), ""}, 2)
	root, other, third := in.Shards["root"], in.Shards["shard-1"], in.Shards["shard-2"]
	p0, p1 := in.Proxies[0], in.Proxies[1]

	ws := func(name, shard string) string {
		m := "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: " + name + "}\n"
		if shard != "" {
			m += "spec: {shard: " + shard + "}\n"
		}
		return m
	}
	ready := func(parent, name string) {
		t.Helper()
		framework.Eventually(t, 60*time.Second, "workspace "+parent+":"+name+" Ready", func() (bool, string) {
			out, _ := p0.KubectlErr(parent, "", "get", "workspace", name, "-o", "jsonpath={.status.phase} {.status.URL} {.status.conditions[0].message}")
			return strings.HasPrefix(out, "Ready "), out
		})
	}

	// A workspace that names no shard stays on its parent's (root); one
	// that names shard-1 lives there, whose parent is on root.
	p0.KubectlApply("root", ws("team-a", ""))
	p0.KubectlApply("root", ws("team-b", "shard-1"))
	ready("root", "team-a")
	ready("root", "team-b")
	if got := p0.Kubectl("root", "get", "workspace", "team-a", "-o", "jsonpath={.spec.shard}"); got != "root" {
		t.Errorf("the shard recorded for a workspace that named none is %q, want root (its parent's)", got)
	}
	if got := p0.Kubectl("root", "get", "workspace", "team-b", "-o", "jsonpath={.status.URL}"); got != p0.URL()+"/clusters/root:team-b" {
		t.Errorf("status.URL of team-b is %q, want the front proxy's address %s/clusters/root:team-b", got, p0.URL())
	}
	// Both directions across shards: a child on root of a parent on
	// shard-1, and a grandchild that stays with its parent on shard-1.
	p0.KubectlApply("root:team-b", ws("back", "root"))
	p0.KubectlApply("root:team-b", ws("stay", ""))
	p0.KubectlApply("root:team-b", ws("third", "shard-2"))
	ready("root:team-b", "back")
	ready("root:team-b", "stay")
	ready("root:team-b", "third")

	// Objects written through one proxy replica are read through the
	// other, and they are stored on the shard that holds the workspace.
	ctx := context.Background()
	for _, c := range []string{"root:team-a", "root:team-b", "root:team-b:back", "root:team-b:stay", "root:team-b:third"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Data: map[string]string{"where": c}}
		if _, err := p0.Client(c).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a ConfigMap in %s through the front proxy: %v", c, err)
		}
		got, err := p1.Client(c).CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil || got.Data["where"] != c {
			t.Fatalf("reading it through the other front proxy: %v %v", got, err)
		}
	}
	// A watch through one proxy sees a change written through the other.
	w, err := p1.Client("root:team-b:back").CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching through the front proxy: %v", err)
	}
	if _, err := p0.Client("root:team-b:back").CoreV1().ConfigMaps("default").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
watching:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch through the front proxy ended")
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && cm.Name == "watched" {
				break watching
			}
		case <-timeout:
			t.Fatal("the watch through the front proxy did not deliver the new ConfigMap")
		}
	}
	w.Stop()

	holds := map[string]*framework.Server{"root:team-a": root, "root:team-b": other, "root:team-b:back": root, "root:team-b:stay": other, "root:team-b:third": third}
	for c, s := range holds {
		if n := liveRows(t, s, c); n == 0 {
			t.Errorf("the shard that holds %s stores no row of it", c)
		}
		for _, o := range []*framework.Server{root, other, third} {
			if o != s && liveRows(t, o, c) != 0 {
				t.Errorf("a shard that does not hold %s stores rows of it", c)
			}
		}
	}

	// kcp sql reports across the shards' databases, each row with its shard.
	store := func(s *framework.Server) string {
		if s.Datastore == "" {
			return "sqlite://" + filepath.Join(s.RootDir, "kcp.db")
		}
		return s.Datastore
	}
	kcpBin, _ := framework.Binaries(t)
	sqlOut, err := exec.Command(kcpBin, "sql", "--report", "tenants", "-o", "csv",
		"--shard", "root="+store(root), "--shard", "shard-1="+store(other), "--shard", "shard-2="+store(third)).CombinedOutput()
	if err != nil {
		t.Fatalf("kcp sql --shard ...: %v\n%s", err, sqlOut)
	}
	for c, s := range holds {
		name := map[*framework.Server]string{root: "root", other: "shard-1", third: "shard-2"}[s]
		framework.MustContain(t, "kcp sql --report tenants across shards", string(sqlOut), name+","+c+",")
	}

	// kubectl ws works through the front proxy unchanged.
	kc := filepath.Join(t.TempDir(), "config")
	raw, err := os.ReadFile(p0.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	plugin := func(args ...string) string {
		t.Helper()
		out, err := root.KubectlPlugin(kc, args...)
		if err != nil {
			t.Fatalf("kubectl %s through the front proxy: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	framework.MustContain(t, "kubectl ws use", plugin("ws", "use", "root:team-b:back"), `Current workspace is "root:team-b:back"`)
	framework.MustContain(t, "kubectl get after ws use", plugin("get", "configmap", "hello", "-n", "default", "-o", "jsonpath={.data.where}"), "root:team-b:back")
	framework.MustContain(t, "kubectl ws create", plugin("ws", "use", "root:team-b"), `Current workspace is "root:team-b"`)
	framework.MustContain(t, "kubectl ws create", plugin("ws", "create", "made-by-plugin"), `Workspace "root:team-b:made-by-plugin" is ready`)

	// Refused, with what to do instead: an unknown shard, a changed shard,
	// and reads across all workspaces through the proxy.
	out, err := p0.KubectlErr("root", ws("nowhere", "shard-9"), "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "no shard has this name; the shards are: root, shard-1, shard-2") {
		t.Errorf("a workspace on an unknown shard: %v\n%s", err, out)
	}
	out, err = p0.KubectlErr("root:team-b:stay", `apiVersion: apis.kcp.io/v1alpha1
kind: APIBinding
metadata: {name: widgets}
spec: {reference: {export: {path: "root:team-a", name: widgets}}}
`, "apply", "-f", "-")
	// (Binding an export of another shard works: TestAPISharingAcrossShards.
	// One that no shard holds is refused as a missing grant is.)
	if err == nil || !strings.Contains(out, "may not bind APIExport widgets of workspace root:team-a") {
		t.Errorf("binding a missing export of another shard: %v\n%s", err, out)
	}
	// A Placement whose location is on another shard: refused with the
	// reason, not as if the location did not exist, and nothing stored.
	out, err = p0.KubectlErr("root:team-b:stay", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: elsewhere}
spec: {locationWorkspace: "root:team-a", namespaceSelector: {}}
`, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "spec.locationWorkspace root:team-a: workspace root:team-a is not on this shard (shard-1), and placing onto the SyncTargets of a location on another shard is not supported yet") {
		t.Errorf("a Placement with a location on another shard: %v\n%s", err, out)
	}
	if out, err := p0.KubectlErr("root:team-b:stay", "", "get", "placements", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("placements after the refusal: %v\n%s", err, out)
	}
	out, err = p0.KubectlErr("root", "", "patch", "workspace", "team-a", "--type=merge", "-p", `{"spec":{"shard":"shard-1"}}`)
	if err == nil || !strings.Contains(out, "the shard of a workspace cannot change") {
		t.Errorf("changing a workspace's shard: %v\n%s", err, out)
	}

	t.Run("a service-account token reaches its workspace on another shard", func(t *testing.T) {
		// A pod's in-cluster client names no workspace: the proxy sends
		// its token to the shard of the workspace the token was issued in,
		// which checks it; the proxy passes it on untouched.
		p0.Kubectl("root:team-b:stay", "create", "serviceaccount", "reader", "-n", "default")
		p0.Kubectl("root:team-b:stay", "create", "rolebinding", "reader", "-n", "default", "--clusterrole", "view", "--serviceaccount", "default:reader")
		token := strings.TrimSpace(p0.Kubectl("root:team-b:stay", "create", "token", "reader", "-n", "default"))
		anonymous := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		code, body := framework.DoWith(t, anonymous, http.MethodGet, p0.URL()+"/api/v1/namespaces/default/configmaps", "", map[string]string{"Authorization": "Bearer " + token})
		if code != http.StatusOK || !strings.Contains(body, `"where":"root:team-b:stay"`) {
			t.Errorf("the token of root:team-b:stay without a /clusters/ prefix through the proxy: %d\n%s", code, body)
		}
		code, body = framework.DoWith(t, anonymous, http.MethodGet, p0.URL()+"/clusters/root:team-a/api/v1/namespaces/default/configmaps", "", map[string]string{"Authorization": "Bearer " + token})
		if (code != http.StatusForbidden && code != http.StatusUnauthorized) || strings.Contains(body, `"where"`) {
			// 401: the root shard does not know the token's service account.
			t.Errorf("the token of root:team-b:stay in root:team-a (on the root shard): %d, want 401 or 403 and no data\n%s", code, body)
		}
	})

	t.Run("reads across all workspaces span the shards", func(t *testing.T) {
		out := p0.Kubectl("*", "get", "configmaps", "-A", "--field-selector", "metadata.name=hello", "-o", `jsonpath={range .items[*]}{.data.where}{" "}{end}`)
		for c := range holds {
			framework.MustContain(t, "kubectl get configmaps -A across all workspaces through the proxy", out, c+" ")
		}
		framework.MustContain(t, "kubectl get -A as a table", p0.Kubectl("*", "get", "configmaps", "-A", "--field-selector", "metadata.name=hello"), "hello")
		all := p0.Client("*").CoreV1().ConfigMaps("")
		list, err := all.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing across all workspaces through the proxy: %v", err)
		}
		rv := list.ResourceVersion
		if !strings.HasPrefix(rv, "shards.") {
			t.Fatalf("the list's resourceVersion %q is not a composite across shards", rv)
		}
		watchFrom := func(from string) (watchEvents func(n int) []string, stop func()) {
			w, err := all.Watch(ctx, metav1.ListOptions{ResourceVersion: from, AllowWatchBookmarks: true})
			if err != nil {
				t.Fatalf("watching across all workspaces from %s: %v", from, err)
			}
			last := from
			return func(n int) []string {
				var got []string
				timeout := time.After(30 * time.Second)
				for len(got) < n {
					select {
					case ev, ok := <-w.ResultChan():
						if !ok {
							t.Fatalf("the watch across shards ended after %v", got)
						}
						cm, _ := ev.Object.(*corev1.ConfigMap)
						if cm == nil {
							continue
						}
						if ev.Type == "BOOKMARK" {
							last = cm.ResourceVersion
							continue
						}
						got = append(got, cm.Annotations["kcp.io/cluster"]+"/"+cm.Name)
					case <-timeout:
						t.Fatalf("the watch across shards delivered only %v", got)
					}
				}
				// The bookmark after the last event says where to resume.
				select {
				case ev := <-w.ResultChan():
					if cm, _ := ev.Object.(*corev1.ConfigMap); ev.Type == "BOOKMARK" && cm != nil {
						last = cm.ResourceVersion
					}
				case <-time.After(10 * time.Second):
				}
				rv = last
				return got
			}, w.Stop
		}
		events, stop := watchFrom(rv)
		p0.Kubectl("root:team-a", "create", "configmap", "across-1", "-n", "default")
		p0.Kubectl("root:team-b:stay", "create", "configmap", "across-2", "-n", "default")
		got := strings.Join(events(2), " ")
		for _, want := range []string{"root:team-a/across-1", "root:team-b:stay/across-2"} {
			if !strings.Contains(got, want) {
				t.Errorf("the watch across shards delivered %s, not %s", got, want)
			}
		}
		stop()
		resumeAt := rv
		if !strings.HasPrefix(resumeAt, "shards.") {
			t.Fatalf("no composite bookmark after the events: %q", resumeAt)
		}
		// Changed while nobody watched: a watch from the bookmark gets
		// exactly the later changes, from both shards.
		p0.Kubectl("root:team-b:stay", "create", "configmap", "across-3", "-n", "default")
		p0.Kubectl("root:team-a", "create", "configmap", "across-4", "-n", "default")
		events, stop = watchFrom(resumeAt)
		got = strings.Join(events(2), " ")
		stop()
		if !strings.Contains(got, "root:team-b:stay/across-3") || !strings.Contains(got, "root:team-a/across-4") || strings.Contains(got, "across-1") {
			t.Errorf("resumed from the composite resourceVersion, the watch delivered %s", got)
		}
		// An object's own resourceVersion names one shard's history only.
		_, err = all.Watch(ctx, metav1.ListOptions{ResourceVersion: list.Items[0].ResourceVersion})
		if err == nil {
			t.Errorf("a watch across shards from a single shard's resourceVersion was accepted")
		} else if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
			t.Errorf("a watch across shards from a single shard's resourceVersion: %v, want 410 Gone", err)
		}
	})

	t.Run("identity cannot be forged", func(t *testing.T) {
		forged := map[string]string{"X-Remote-User": "kcp-admin", "X-Remote-Group": "system:masters"}
		anonymous := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		alice := framework.UserClient(t, root, "alice")
		for what, req := range map[string]struct {
			c   *http.Client
			url string
		}{
			"anonymous through the proxy":           {anonymous, p0.URL() + "/clusters/root:team-b/api/v1/namespaces/default/configmaps"},
			"anonymous at the shard":                {anonymous, other.URL() + "/clusters/root:team-b/api/v1/namespaces/default/configmaps"},
			"alice's certificate through the proxy": {alice, p0.URL() + "/clusters/root:team-b/api/v1/namespaces/default/configmaps"},
			"alice's certificate at the shard":      {alice, other.URL() + "/clusters/root:team-b/api/v1/namespaces/default/configmaps"},
		} {
			code, body := framework.DoWith(t, req.c, http.MethodGet, req.url, "", forged)
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("%s with X-Remote-User kcp-admin, X-Remote-Group system:masters: %d, want 401 or 403\n%s", what, code, body)
			}
			if strings.Contains(body, `"where"`) {
				t.Errorf("%s: data came back:\n%s", what, body)
			}
		}
	})

	t.Run("a shard serves only its own workspaces", func(t *testing.T) {
		// Sent straight to the shard that does not hold it, a workspace's
		// path finds nothing, even for the admin.
		_, err := root.Client("root:team-b").CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("root:team-b asked of the root shard: %v, want 403 (it does not exist there)", err)
		}
		_, err = other.Client("root:team-a").CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("root:team-a asked of shard-1: %v, want 403", err)
		}
	})

	t.Run("the owner enters a workspace on another shard", func(t *testing.T) {
		grant := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: workspace-creator}
rules:
- {apiGroups: [tenancy.kcp.io], resources: [workspaces], verbs: [create, get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-creates}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workspace-creator}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
`
		p0.KubectlApply("root", grant)
		aliceCfg := framework.UserConfig(t, root, "alice")
		aliceCfg.Host = p0.URL() + "/clusters/root"
		ac := kubernetes.NewForConfigOrDie(aliceCfg)
		body := `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace","metadata":{"name":"alices"},"spec":{"shard":"shard-1"}}`
		if err := ac.RESTClient().Post().AbsPath("/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces").Body([]byte(body)).SetHeader("Content-Type", "application/json").Do(ctx).Error(); err != nil {
			t.Fatalf("alice creates a workspace on shard-1 through the proxy: %v", err)
		}
		ready("root", "alices")
		aliceCfg.Host = p0.URL() + "/clusters/root:alices"
		if _, err := kubernetes.NewForConfigOrDie(aliceCfg).CoreV1().ConfigMaps("default").Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("alice, owner of root:alices, writes in it: %v", err)
		}
		bobCfg := framework.UserConfig(t, root, "bob")
		bobCfg.Host = p0.URL() + "/clusters/root:alices"
		if _, err := kubernetes.NewForConfigOrDie(bobCfg).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("bob reads root:alices: %v, want 403", err)
		}
	})

	t.Run("access granted in a parent on another shard", func(t *testing.T) {
		// carol may enter root:team-b by a grant in root (on the root
		// shard); dave has only a binding inside root:team-b, which does
		// not let anyone in, as on one server.
		root.GrantAccess("root", "carol", "team-b")
		p0.KubectlApply("root:team-b", `apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: viewers, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: carol}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: dave}
`)
		list := func(user string) error {
			cfg := framework.UserConfig(t, root, user)
			cfg.Host = p0.URL() + "/clusters/root:team-b"
			_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err
		}
		framework.Eventually(t, 30*time.Second, "carol reads root:team-b", func() (bool, string) {
			err := list("carol")
			return err == nil, fmt.Sprint(err)
		})
		if err := list("dave"); !apierrors.IsForbidden(err) {
			t.Errorf("dave, bound only inside root:team-b, reads it: %v, want 403", err)
		}
		p0.Kubectl("root", "delete", "clusterrolebinding", "carol-access")
		framework.Eventually(t, 40*time.Second, "carol refused once the grant in root is gone", func() (bool, string) {
			err := list("carol")
			return apierrors.IsForbidden(err), fmt.Sprint(err)
		})
	})

	t.Run("deleting a workspace deletes its data on its shard", func(t *testing.T) {
		p0.Kubectl("root", "delete", "workspace", "team-b", "--wait=false")
		framework.Eventually(t, 90*time.Second, "workspace team-b gone", func() (bool, string) {
			out, err := p0.KubectlErr("root", "", "get", "workspace", "team-b", "-o", "jsonpath={.status.phase} {.status.conditions[0].message}")
			return err != nil && strings.Contains(out, "NotFound"), out
		})
		for _, c := range []string{"root:team-b", "root:team-b:stay", "root:team-b:made-by-plugin"} {
			if n := liveRows(t, other, c); n != 0 {
				t.Errorf("shard-1 still stores %d rows of %s after its workspace was deleted", n, c)
			}
		}
		if n := liveRows(t, root, "root:team-b:back"); n != 0 {
			t.Errorf("the root shard still stores %d rows of root:team-b:back (a child of the deleted workspace)", n)
		}
		if n := liveRows(t, third, "root:team-b:third"); n != 0 {
			t.Errorf("shard-2 still stores %d rows of root:team-b:third (a child of the deleted workspace)", n)
		}
		_, err := p0.Client("root:team-b").CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("root:team-b after its deletion: %v, want 403", err)
		}
	})

	t.Run("a shard whose database is stopped fails only its own workspaces", func(t *testing.T) {
		p0.KubectlApply("root", ws("team-c", "shard-1"))
		ready("root", "team-c")
		admin, err := sql.Open("pgx", framework.PostgresDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		u, _ := url.Parse(other.Datastore)
		dbName := strings.TrimPrefix(u.Path, "/")
		stop := func(stopped bool) {
			if _, err := admin.Exec(fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS %v`, dbName, !stopped)); err != nil {
				t.Fatal(err)
			}
			if stopped {
				if _, err := admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName); err != nil {
					t.Fatal(err)
				}
			}
		}
		stop(true)
		defer stop(false)
		framework.Eventually(t, 30*time.Second, "a write into root:team-c refused with 503 and Retry-After", func() (bool, string) {
			code, body, retry := do(t, p0, http.MethodPost, "/clusters/root:team-c/api/v1/namespaces/default/configmaps", `{"metadata":{"generateName":"x-"}}`)
			return code == http.StatusServiceUnavailable && retry != "", fmt.Sprintf("%d %q %s", code, retry, body)
		})
		code, body, _ := do(t, p0, http.MethodPost, "/clusters/root:team-a/api/v1/namespaces/default/configmaps", `{"metadata":{"generateName":"x-"}}`)
		if code != http.StatusCreated {
			t.Errorf("a write into root:team-a (root shard) while shard-1's database is stopped: %d\n%s", code, body)
		}
		stop(false)
		framework.Eventually(t, 60*time.Second, "writes into root:team-c stored again", func() (bool, string) {
			code, body, _ := do(t, p0, http.MethodPost, "/clusters/root:team-c/api/v1/namespaces/default/configmaps", `{"metadata":{"generateName":"x-"}}`)
			return code == http.StatusCreated, fmt.Sprintf("%d %s", code, body)
		})
	})

	t.Run("a shard that is down fails only its own workspaces", func(t *testing.T) {
		other.Kill()
		code, body, retry := get(t, p0, "/clusters/root:team-c/api/v1/namespaces/default/configmaps")
		if code != http.StatusServiceUnavailable || retry == "" {
			t.Errorf("a workspace of a shard that is down: %d (Retry-After %q), want 503 with Retry-After\n%s", code, retry, body)
		}
		// A workspace asked for on the shard that is down waits, and says
		// why, until the shard is back.
		p0.KubectlApply("root", ws("team-d", "shard-1"))
		framework.Eventually(t, 30*time.Second, "team-d says it waits for shard-1", func() (bool, string) {
			out, _ := p0.KubectlErr("root", "", "get", "workspace", "team-d", "-o", "jsonpath={.status.phase}: {.status.conditions[0].message}")
			return strings.HasPrefix(out, "Initializing: ") && strings.Contains(out, "on shard shard-1"), out
		})
		if _, err := p0.Client("root:team-a").CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{}); err != nil {
			t.Errorf("a workspace of the root shard while shard-1 is down: %v", err)
		}
		other.Start()
		framework.Eventually(t, 60*time.Second, "root:team-c served again", func() (bool, string) {
			_, err := p0.Client("root:team-c").CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err == nil, ""
		})
		ready("root", "team-d")
		// shard-1's start swept for clusters without their Workspace: the
		// ones whose Workspace is on another shard are not its to delete.
		cfg := framework.UserConfig(t, root, "alice")
		cfg.Host = p0.URL() + "/clusters/root:alices"
		if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").Get(ctx, "mine", metav1.GetOptions{}); err != nil {
			t.Errorf("root:alices (on shard-1, its Workspace on root) after shard-1 restarted: %v", err)
		}
	})
}

// get sends an admin request through the proxy.
func get(t *testing.T, p *framework.FrontProxy, path string) (int, string, string) {
	t.Helper()
	return do(t, p, http.MethodGet, path, "")
}

// do sends an admin request through the proxy and returns the status,
// the start of the body and Retry-After.
func do(t *testing.T, p *framework.FrontProxy, method, path, body string) (int, string, string) {
	t.Helper()
	cfg := p.Config("root")
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	req, err := http.NewRequest(method, p.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b := make([]byte, 4096)
	n, _ := resp.Body.Read(b)
	return resp.StatusCode, string(b[:n]), resp.Header.Get("Retry-After")
}

// liveRows counts a logical cluster's live objects in a shard's database.
func liveRows(t *testing.T, s *framework.Server, cluster string) int {
	t.Helper()
	var db *sql.DB
	var err error
	q := `SELECT COUNT(*) FROM kine k WHERE k.cluster = ? AND k.deleted = 0 AND k.id = (SELECT MAX(l.id) FROM kine l WHERE l.name = k.name)`
	if s.Datastore == "" {
		db, err = sql.Open("sqlite3", "file:"+filepath.Join(s.RootDir, "kcp.db")+"?mode=ro&_busy_timeout=5000")
	} else {
		db, err = sql.Open("pgx", s.Datastore)
		q = strings.Replace(q, "?", "$1", 1)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(q, cluster).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
