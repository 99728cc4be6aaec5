package shards

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestMoveWorkspace moves a workspace from one shard (PostgreSQL) to
// another (SQLite) while clients write to it and watch it through the
// front proxy: writes fail only with the freeze's 403 while it moves,
// every acknowledged write is on the new shard after, a watch ends with
// exactly the new shard's objects (resuming or relisting on 410), the old
// shard keeps no row and serves nothing of it, and kubectl reads and
// writes it through the proxy. The old shard's revision counter is ahead
// of the new one's: a resourceVersion of the old shard answers 410 on the
// new one.
func TestMoveWorkspace(t *testing.T) {
	in := framework.StartShards(t, []string{"", framework.DatastoreFor(t, framework.Postgres), ""}, 1)
	source, target := in.Shards["shard-1"], in.Shards["shard-2"]
	p := in.Proxies[0]
	ctx := context.Background()
	const c = "root:mover"

	p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: mover}\nspec: {shard: shard-1}\n---\n"+
		"apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: filler}\nspec: {shard: shard-1}\n")
	for _, name := range []string{"mover", "filler"} {
		framework.Eventually(t, 60*time.Second, "workspace "+name+" Ready", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspace", name, "-o", "jsonpath={.status.phase}")
			return out == "Ready", out
		})
	}
	admin := p.Client(c)
	for i := range 40 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("before-%02d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The source's revision counter runs ahead of the target's: writes of
	// another workspace on the source.
	filler := p.Client("root:filler")
	for i := range 300 {
		if _, err := filler.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("f-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sourceList, err := admin.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sourceRV := sourceList.ResourceVersion
	targetRV, err := target.Client("root").CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before the move: source list resourceVersion %s, target's %s", sourceRV, targetRV.ResourceVersion)

	// A watcher through the front proxy, as a reflector: list, watch from
	// the list's resourceVersion, watch again from the last event's when
	// the watch ends, list again on 410.
	wctx, stopWatcher := context.WithCancel(ctx)
	watcher := newMirror(p.Client(c))
	watcherDone := make(chan struct{})
	go func() { defer close(watcherDone); watcher.run(wctx) }()

	// Writers through the front proxy, until the move is over.
	writers, stopWriters := context.WithCancel(ctx)
	var mu sync.Mutex
	var acked []string
	var refusals, otherErrors []string
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := p.Config(c)
			cfg.Timeout = 20 * time.Second // a write that hangs is an error, not a stuck test
			cs := kubernetes.NewForConfigOrDie(cfg)
			for i := 0; writers.Err() == nil; i++ {
				name := fmt.Sprintf("w%d-%04d", w, i)
				sent := time.Now()
				_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"by": "writer"}}, metav1.CreateOptions{})
				mu.Lock()
				switch {
				case err == nil:
					acked = append(acked, name)
				case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "moving to shard shard-2"):
					refusals = append(refusals, err.Error())
				default:
					otherErrors = append(otherErrors, fmt.Sprintf("%s (sent %s, answered %s): %v", name, sent.UTC().Format("15:04:05.000"), time.Now().UTC().Format("15:04:05.000"), err))
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)

	p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: to-2}\nspec: {workspace: mover, toShard: shard-2}\n")
	var status string
	framework.Eventually(t, 120*time.Second, "WorkspaceMove to-2 Succeeded", func() (bool, string) {
		status, _ = p.KubectlErr("root", "", "get", "workspacemove", "to-2", "-o", "jsonpath={.status.phase} {.status.message}")
		return strings.HasPrefix(status, "Succeeded ") || strings.HasPrefix(status, "Failed "), status
	})
	if !strings.HasPrefix(status, "Succeeded ") {
		t.Fatalf("the move: %s\nsource log:\n%s", status, source.LogTail(40))
	}
	t.Logf("move: %s; %s", status, p.Kubectl("root", "get", "workspacemove", "to-2", "-o", "jsonpath=started {.status.startedAt} frozen {.status.frozenAt} switched {.status.switchedAt} completed {.status.completedAt}; frozen copy: {.status.frozenCopy}"))
	time.Sleep(2 * time.Second) // writes after the move
	stopWriters()
	wg.Wait()

	mu.Lock()
	t.Logf("writes: %d acknowledged, %d refused while frozen, %d other errors", len(acked), len(refusals), len(otherErrors))
	if len(otherErrors) > 0 {
		t.Errorf("writes failed other than with the freeze's 403: %v\n--- front proxy log ---\n%s\n--- old shard log ---\n%s\n--- new shard log ---\n%s",
			otherErrors, p.LogTail(60), source.LogTail(60), target.LogTail(60))
	}
	if len(refusals) > 0 {
		t.Logf("a refusal: %s", refusals[0])
	}
	mu.Unlock()

	if got := p.Kubectl("root", "get", "workspace", "mover", "-o", "jsonpath={.spec.shard}"); got != "shard-2" {
		t.Errorf("the Workspace's spec.shard after the move is %q, want shard-2", got)
	}
	// Every acknowledged write is on the new shard.
	onTarget, err := target.Client(c).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing on the new shard directly: %v", err)
	}
	have := map[string]corev1.ConfigMap{}
	for _, cm := range onTarget.Items {
		have[cm.Name] = cm
	}
	for _, name := range acked {
		if _, ok := have[name]; !ok {
			t.Errorf("acknowledged write %s is not on the new shard", name)
		}
	}
	for i := range 40 {
		name := fmt.Sprintf("before-%02d", i)
		before := findCM(sourceList.Items, name)
		got, ok := have[name]
		if !ok || before == nil {
			t.Errorf("%s is not on the new shard", name)
			continue
		}
		if got.UID != before.UID || got.Data["i"] != fmt.Sprint(i) || !got.CreationTimestamp.Equal(&before.CreationTimestamp) {
			t.Errorf("%s on the new shard: UID %s data %v created %v; before the move: UID %s created %v", name, got.UID, got.Data, got.CreationTimestamp, before.UID, before.CreationTimestamp)
		}
	}
	// The old shard keeps no row and serves nothing of it.
	if n := liveRows(t, source, c); n != 0 {
		t.Errorf("the old shard still stores %d rows of %s", n, c)
	}
	if _, err := source.Client(c).CoreV1().ConfigMaps("default").Get(ctx, "before-00", metav1.GetOptions{}); err == nil {
		t.Errorf("the old shard still serves %s's objects when asked directly", c)
	} else {
		t.Logf("asked directly, the old shard answers: %v", err)
	}
	if n := liveRows(t, target, c); n == 0 {
		t.Errorf("the new shard stores no row of %s", c)
	}

	// kubectl through the proxy reads and writes the moved workspace.
	p.Kubectl(c, "create", "configmap", "after-move", "-n", "default", "--from-literal=k=v")
	if got := p.Kubectl(c, "get", "configmap", "after-move", "-n", "default", "-o", "jsonpath={.data.k}"); got != "v" {
		t.Errorf("kubectl get after the move: %q", got)
	}

	// The watcher ends with exactly the new shard's objects.
	final, err := target.Client(c).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, cm := range final.Items {
		want[cm.Name] = cm.ResourceVersion
	}
	framework.Eventually(t, 30*time.Second, "the watcher through the proxy to show the new shard's objects", func() (bool, string) {
		got := watcher.snapshot()
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("watcher has %d objects, the new shard %d; differences: %s", len(got), len(want), diff(got, want))
	})
	stopWatcher()
	<-watcherDone
	t.Logf("watcher: %d lists, %d watches, %d times 410", watcher.lists, watcher.watches, watcher.gone)

	// A resourceVersion of the old shard (its counter was ahead) answers
	// 410 on the new one, through the proxy: never a silent gap.
	_, err = admin.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: sourceRV})
	if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
		t.Errorf("a watch from the old shard's resourceVersion %s after the move: %v, want 410 Gone", sourceRV, err)
	}

	t.Run("a tenant cannot move a workspace", func(t *testing.T) {
		in.Shards["root"].GrantAccess("root", "tina", "mover")
		p.KubectlApply(c, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: tina-admin}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: tina}]\n")
		cfg := framework.UserConfig(t, in.Shards["root"], "tina")
		cfg.Host = p.URL() + "/clusters/" + c
		tina := kubernetes.NewForConfigOrDie(cfg)
		framework.Eventually(t, 30*time.Second, "tina, admin of "+c+", to list there", func() (bool, string) {
			_, err := tina.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err == nil, fmt.Sprint(err)
		})
		cfg.Host = p.URL() + "/clusters/root"
		d := dynamic.NewForConfigOrDie(cfg)
		_, err := d.Resource(tenancy.WorkspaceMovesResource).Create(ctx, moveObject("by-tina", "mover", "shard-1"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("tina creating a WorkspaceMove in root: %v, want 403", err)
		}
		// The shards' move API refuses her certificate, forged peer
		// headers or not, at the shard and through the proxy.
		forged := map[string]string{"X-Remote-User": "system:kcp:shard:root", "X-Remote-Group": "system:kcp:shards", "Content-Type": "application/json"}
		body := `{"cluster":"root:mover","final":true,"rows":{}}`
		tinaHTTP := framework.UserClient(t, in.Shards["root"], "tina")
		for what, url := range map[string]string{"at the shard": target.URL(), "through the proxy": p.URL()} {
			// discard and thaw undo a move: a tenant must not reach them
			// either (discard deletes a shard's rows of a cluster).
			for _, call := range []string{"release", "discard", "thaw"} {
				code, out := framework.DoWith(t, tinaHTTP, http.MethodPost, url+"/kcp-move/v1/"+call, body, forged)
				if code != http.StatusForbidden {
					t.Errorf("tina calling the move API's %s %s with forged peer headers: %d, want 403\n%s", call, what, code, out)
				}
			}
		}
		if n := liveRows(t, target, c); n == 0 {
			t.Errorf("the new shard's copy is gone after the forged calls")
		}
	})

	t.Run("from the parent's shard, then deleted", func(t *testing.T) {
		// A workspace on its parent's shard (root), with a child: the
		// move is refused until the child is gone.
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: home}\n")
		framework.Eventually(t, 60*time.Second, "workspace home Ready", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspace", "home", "-o", "jsonpath={.status.phase}")
			return out == "Ready", out
		})
		p.KubectlApply("root:home", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: kid}\n")
		p.Kubectl("root:home", "create", "configmap", "at-home", "-n", "default", "--from-literal=k=v")
		uid := p.Kubectl("root:home", "get", "configmap", "at-home", "-n", "default", "-o", "jsonpath={.metadata.uid}")
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: home-tree}\nspec: {workspace: home, toShard: shard-1}\n")
		framework.Eventually(t, 30*time.Second, "WorkspaceMove home-tree refused", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspacemove", "home-tree", "-o", "jsonpath={.status.phase} {.status.message}")
			return strings.HasPrefix(out, "Failed ") && strings.Contains(out, "child workspaces"), out
		})
		p.Kubectl("root:home", "delete", "workspace", "kid", "--wait=true", "--timeout=60s")
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: home-to-1}\nspec: {workspace: home, toShard: shard-1}\n")
		moveEnded(t, p, "home-to-1", 60*time.Second)
		if out := p.Kubectl("root", "get", "workspacemove", "home-to-1", "-o", "jsonpath={.status.phase} {.status.message}"); !strings.HasPrefix(out, "Succeeded ") {
			t.Fatalf("moving home from the parent's shard: %s", out)
		}
		if got := p.Kubectl("root:home", "get", "configmap", "at-home", "-n", "default", "-o", "jsonpath={.metadata.uid}"); got != uid {
			t.Errorf("at-home after the move: UID %q, want %q", got, uid)
		}
		if n := liveRows(t, in.Shards["root"], "root:home"); n != 0 {
			t.Errorf("the parent's shard still stores %d rows of root:home", n)
		}
		// Deleting the moved workspace deletes its data on its new shard.
		p.Kubectl("root", "delete", "workspace", "home", "--wait=true", "--timeout=60s")
		framework.Eventually(t, 30*time.Second, "root:home's rows gone from shard-1", func() (bool, string) {
			n := liveRows(t, source, "root:home")
			return n == 0, fmt.Sprintf("%d rows", n)
		})
	})

	t.Run("an unknown shard is refused with the list of shards", func(t *testing.T) {
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: nowhere}\nspec: {workspace: mover, toShard: shard-9}\n")
		framework.Eventually(t, 30*time.Second, "WorkspaceMove nowhere Failed", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspacemove", "nowhere", "-o", "jsonpath={.status.phase} {.status.message}")
			return strings.HasPrefix(out, "Failed ") && strings.Contains(out, "root, shard-1, shard-2"), out
		})
	})
}

func moveObject(name, ws, to string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "WorkspaceMove",
		"metadata": map[string]interface{}{"name": name},
		"spec":     map[string]interface{}{"workspace": ws, "toShard": to},
	}}
}

func findCM(items []corev1.ConfigMap, name string) *corev1.ConfigMap {
	for i := range items {
		if items[i].Name == name {
			return &items[i]
		}
	}
	return nil
}

func diff(got, want map[string]string) string {
	var out []string
	for k, v := range want {
		if got[k] != v {
			out = append(out, fmt.Sprintf("%s: watcher %q, shard %q", k, got[k], v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, k+": only in the watcher")
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], "...")
	}
	return strings.Join(out, "; ")
}

// mirror keeps what a list and watch of ConfigMaps in default shows, as a
// reflector does.
type mirror struct {
	cs                   kubernetes.Interface
	mu                   sync.Mutex
	objects              map[string]string // name -> resourceVersion
	lists, watches, gone int
}

func newMirror(cs kubernetes.Interface) *mirror { return &mirror{cs: cs, objects: map[string]string{}} }

func (m *mirror) snapshot() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]string, len(m.objects))
	for k, v := range m.objects {
		out[k] = v
	}
	return out
}

func (m *mirror) run(ctx context.Context) {
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			l, err := m.cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			m.mu.Lock()
			m.lists++
			m.objects = map[string]string{}
			for _, cm := range l.Items {
				m.objects[cm.Name] = cm.ResourceVersion
			}
			m.mu.Unlock()
			rv = l.ResourceVersion
		}
		w, err := m.cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				m.mu.Lock()
				m.gone++
				m.mu.Unlock()
				rv = ""
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		m.mu.Lock()
		m.watches++
		m.mu.Unlock()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if st := apierrors.FromObject(ev.Object); apierrors.IsGone(st) || apierrors.IsResourceExpired(st) {
					m.mu.Lock()
					m.gone++
					m.mu.Unlock()
					rv = ""
				}
				break
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			rv = cm.ResourceVersion
			if ev.Type == watch.Bookmark {
				continue
			}
			m.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(m.objects, cm.Name)
			} else {
				m.objects[cm.Name] = cm.ResourceVersion
			}
			m.mu.Unlock()
		}
		w.Stop()
	}
}

// TestMoveWorkspaceResumesAfterKill kills the parent's shard (which runs
// the move) with SIGKILL while the move copies: the workspace stays
// readable meanwhile (writable, or frozen with the moving message: the
// frozen copy sends only what changed since the pre-copy, so the kill
// mostly lands in the pre-copy), and the move completes when that shard
// is back, with every object on the new shard and none on the old one.
func TestMoveWorkspaceResumesAfterKill(t *testing.T) {
	in := framework.StartShards(t, []string{"", framework.DatastoreFor(t, framework.Postgres), ""}, 1)
	root, source, target := in.Shards["root"], in.Shards["shard-1"], in.Shards["shard-2"]
	p := in.Proxies[0]
	ctx := context.Background()
	const c, n = "root:big", 3000

	readyWorkspaceOn(t, p, "big", "shard-1")
	cs := p.Client(c)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: map[string]string{"payload": strings.Repeat("x", 500)}}
				if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	before, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: big-to-2}\nspec: {workspace: big, toShard: shard-2}\n")
	framework.Eventually(t, 60*time.Second, "the move to be copying", func() (bool, string) {
		out, _ := p.KubectlErr("root", "", "get", "workspacemove", "big-to-2", "-o", "jsonpath={.status.step} {.status.phase}")
		return (strings.HasPrefix(out, "Precopying") && liveRows(t, target, c) > 0) || strings.HasPrefix(out, "Freezing") ||
			strings.HasPrefix(out, "Copying") || strings.Contains(out, "Succeeded"), out
	})
	root.Kill()
	t.Logf("killed the parent's shard mid-move; the new shard holds %d rows of %s so far", liveRows(t, target, c), c)
	if liveRows(t, target, c) >= len(before.Items)+5 {
		t.Logf("the copy had finished before the kill: the test shows resumption of the later steps only")
	}

	// Meanwhile the workspace is readable through the proxy; a write is
	// acknowledged (before the freeze) or refused with the freeze's
	// message.
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "cm-0001", metav1.GetOptions{})
	if err != nil || got.Data["payload"] == "" {
		t.Errorf("reading the workspace while the move is stopped: %v", err)
	}
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during"}}, metav1.CreateOptions{})
	duringAcked := err == nil
	if err != nil && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "moving to shard shard-2")) {
		t.Errorf("a write while the move is stopped: %v, want it acknowledged or 403 saying it is moving", err)
	}
	t.Logf("a write while the move is stopped: %v", err)

	root.Start()
	status := moveEnded(t, p, "big-to-2", 120*time.Second)
	if !strings.HasPrefix(status, "Succeeded ") {
		t.Fatalf("the resumed move: %s", status)
	}
	t.Logf("resumed move: %s", status)
	after, err := target.Client(c).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, cm := range after.Items {
		uids[cm.Name] = string(cm.UID)
	}
	for _, cm := range before.Items {
		if uids[cm.Name] != string(cm.UID) {
			t.Errorf("%s on the new shard: UID %q, want %q", cm.Name, uids[cm.Name], cm.UID)
		}
	}
	want := len(before.Items)
	if duringAcked {
		want++
		if _, ok := uids["during"]; !ok {
			t.Errorf("the write acknowledged while the move was stopped is not on the new shard")
		}
	}
	if len(after.Items) != want {
		t.Errorf("the new shard has %d ConfigMaps, want %d", len(after.Items), want)
	}
	if n := liveRows(t, source, c); n != 0 {
		t.Errorf("the old shard still stores %d rows of %s", n, c)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("writing the moved workspace through the proxy: %v", err)
	}
}

// TestMoveWorkspaceTargetKilled kills the NEW shard with SIGKILL while the
// move copies to it: meanwhile the workspace stays readable and writable
// from the old shard through the front proxy (a write is acknowledged or
// refused with the freeze's message, nothing else), and once the new shard
// is back the move completes with every acknowledged write on it.
func TestMoveWorkspaceTargetKilled(t *testing.T) {
	in := framework.StartShards(t, []string{"", framework.DatastoreFor(t, framework.Postgres), ""}, 1)
	source, target := in.Shards["shard-1"], in.Shards["shard-2"]
	p := in.Proxies[0]
	ctx := context.Background()
	const c, n = "root:tk", 3000

	readyWorkspaceOn(t, p, "tk", "shard-1")
	fillConfigMaps(t, p.Client(c), n)

	writers, stopWriters := context.WithCancel(ctx)
	var mu sync.Mutex
	var acked, otherErrors []string
	refused := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cfg := p.Config(c)
		cfg.Timeout = 20 * time.Second
		cs := kubernetes.NewForConfigOrDie(cfg)
		for i := 0; writers.Err() == nil; i++ {
			name := fmt.Sprintf("w-%04d", i)
			_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			mu.Lock()
			switch {
			case err == nil:
				acked = append(acked, name)
			case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "moving to shard shard-2"):
				refused++
			default:
				otherErrors = append(otherErrors, fmt.Sprintf("%s: %v", name, err))
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()

	p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: tk-to-2}\nspec: {workspace: tk, toShard: shard-2}\n")
	framework.Eventually(t, 60*time.Second, "the move to be copying into shard-2", func() (bool, string) {
		out, _ := p.KubectlErr("root", "", "get", "workspacemove", "tk-to-2", "-o", "jsonpath={.status.step} {.status.phase}")
		return (strings.HasPrefix(out, "Precopying") && liveRows(t, target, c) > 0) || strings.Contains(out, "Succeeded"), out
	})
	target.Kill()
	step := p.Kubectl("root", "get", "workspacemove", "tk-to-2", "-o", "jsonpath={.status.step}")
	t.Logf("killed the new shard mid-move (step %s)", step)

	// While it is down: reads work, writes are acknowledged or refused
	// with the freeze's message (the writer above checks), for a while.
	for i := range 10 {
		got, err := p.Client(c).CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%04d", i*100), metav1.GetOptions{})
		if err != nil || got.Data["payload"] == "" {
			t.Errorf("reading the workspace while the new shard is down: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	mu.Lock()
	whileDown := len(acked)
	mu.Unlock()
	if out := p.Kubectl("root", "get", "workspacemove", "tk-to-2", "-o", "jsonpath={.status.phase} {.status.message}"); !strings.Contains(out, "retrying") {
		t.Logf("move status while the new shard is down: %s", out)
	}

	target.Start()
	status := moveEnded(t, p, "tk-to-2", 180*time.Second)
	if !strings.HasPrefix(status, "Succeeded ") {
		t.Fatalf("the move after the new shard came back: %s\nnew shard log:\n%s", status, target.LogTail(40))
	}
	t.Logf("resumed move: %s; frozen copy: %s", status, p.Kubectl("root", "get", "workspacemove", "tk-to-2", "-o", "jsonpath={.status.frozenCopy}"))
	time.Sleep(time.Second)
	stopWriters()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("writes: %d acknowledged (%d by the time the new shard came back), %d refused while frozen, %d other errors", len(acked), whileDown, refused, len(otherErrors))
	if len(otherErrors) > 0 {
		t.Errorf("writes failed other than with the freeze's 403: %v", otherErrors)
	}
	after, err := target.Client(c).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, cm := range after.Items {
		have[cm.Name] = true
	}
	for i := range n {
		if name := fmt.Sprintf("cm-%04d", i); !have[name] {
			t.Errorf("%s is not on the new shard", name)
		}
	}
	for _, name := range acked {
		if !have[name] {
			t.Errorf("acknowledged write %s is not on the new shard", name)
		}
	}
	if n := liveRows(t, source, c); n != 0 {
		t.Errorf("the old shard still stores %d rows of %s", n, c)
	}
}

// fillConfigMaps creates n ConfigMaps cm-0000... of 500 bytes in default.
// readyWorkspaceOn creates the workspace name in root on shard and waits
// until it is Ready.
func readyWorkspaceOn(t *testing.T, p *framework.FrontProxy, name, shard string) {
	t.Helper()
	p.KubectlApply("root", fmt.Sprintf("apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: %s}\nspec: {shard: %s}\n", name, shard))
	framework.Eventually(t, 60*time.Second, "workspace "+name+" Ready", func() (bool, string) {
		out, _ := p.KubectlErr("root", "", "get", "workspace", name, "-o", "jsonpath={.status.phase}")
		return out == "Ready", out
	})
}

// moveEnded waits up to timeout for the WorkspaceMove name in root to
// succeed or fail, and returns its "<phase> <message>".
func moveEnded(t *testing.T, p *framework.FrontProxy, name string, timeout time.Duration) string {
	t.Helper()
	var status string
	framework.Eventually(t, timeout, "WorkspaceMove "+name+" to end", func() (bool, string) {
		status, _ = p.KubectlErr("root", "", "get", "workspacemove", name, "-o", "jsonpath={.status.phase} {.status.message}")
		return strings.HasPrefix(status, "Succeeded ") || strings.HasPrefix(status, "Failed "), status
	})
	return status
}

func fillConfigMaps(t *testing.T, cs kubernetes.Interface, n int) {
	t.Helper()
	ctx := context.Background()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: map[string]string{"payload": strings.Repeat("x", 500)}}
				if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Error(err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}
