package shards

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestMoveWorkspaceUndone: a move that does not complete leaves no copy
// the new shard does not serve. A WorkspaceMove deleted while it copies is
// undone (the new shard's partial copy deleted through its move API, the
// old shard serving the workspace and taking writes again) before it goes;
// a second move of a workspace that one copies waits for it, and
// withdrawing the second leaves the first's copy alone; a move of a
// workspace whose shard records the change history (which a move does not
// copy) fails with the reason.
func TestMoveWorkspaceUndone(t *testing.T) {
	in := framework.StartShards(t, []string{"", framework.DatastoreFor(t, framework.Postgres), ""}, 1)
	source, target := in.Shards["shard-1"], in.Shards["shard-2"]
	p := in.Proxies[0]
	ctx := context.Background()

	for _, name := range []string{"wd", "pair", "hist"} {
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: "+name+"}\nspec: {shard: shard-1}\n")
		framework.Eventually(t, 60*time.Second, "workspace "+name+" Ready", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspace", name, "-o", "jsonpath={.status.phase}")
			return out == "Ready", out
		})
	}
	writable := func(t *testing.T, c, name string) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, c+" writable through the proxy", func() (bool, string) {
			_, err := p.Client(c).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err), "create: " + errString(err)
		})
	}

	t.Run("deleted while it copies", func(t *testing.T) {
		const c = "root:wd"
		fillConfigMaps(t, p.Client(c), 3000)
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: wd-to-2}\nspec: {workspace: wd, toShard: shard-2}\n")
		framework.Eventually(t, 60*time.Second, "the move to have copied some rows", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspacemove", "wd-to-2", "-o", "jsonpath={.status.step} {.status.phase}")
			return liveRows(t, target, c) > 0 || strings.Contains(out, "Succeeded"), out
		})
		step := p.Kubectl("root", "get", "workspacemove", "wd-to-2", "-o", "jsonpath={.status.step} {.status.phase}")
		if strings.Contains(step, "Succeeded") {
			t.Skip("the move completed before it could be deleted")
		}
		t.Logf("deleting the WorkspaceMove at step %s, %d rows on the new shard", step, liveRows(t, target, c))
		p.Kubectl("root", "delete", "workspacemove", "wd-to-2", "--wait=false")
		framework.Eventually(t, 120*time.Second, "the WorkspaceMove gone", func() (bool, string) {
			out, err := p.KubectlErr("root", "", "get", "workspacemove", "wd-to-2", "-o", "jsonpath={.status.phase} {.status.message}")
			return err != nil && strings.Contains(out, "NotFound"), out
		})
		if n := liveRows(t, target, c); n != 0 {
			t.Errorf("the new shard still stores %d rows of %s after the move was withdrawn", n, c)
		}
		if n := liveRows(t, source, c); n < 3000 {
			t.Errorf("the old shard stores %d rows of %s, fewer than the 3000 ConfigMaps", n, c)
		}
		if got := p.Kubectl("root", "get", "workspace", "wd", "-o", "jsonpath={.spec.shard}"); got != "shard-1" {
			t.Errorf("the Workspace's spec.shard is %q, want shard-1", got)
		}
		if a, err := source.KubectlErr(c, "", "get", "logicalcluster", "cluster", "-o", "jsonpath={.metadata.annotations}"); err != nil || strings.Contains(a, "tenancy.kcp.io/move") {
			t.Errorf("the old shard's LogicalCluster after the withdrawal: %s %v, want it without the move's annotations", a, err)
		}
		writable(t, c, "after-withdraw")
		if got, err := p.Client(c).CoreV1().ConfigMaps("default").Get(ctx, "cm-2999", metav1.GetOptions{}); err != nil || got.Data["payload"] == "" {
			t.Errorf("reading through the proxy after the withdrawal: %v", err)
		}
	})

	t.Run("a second move waits, and withdrawing it leaves the first's copy", func(t *testing.T) {
		const c = "root:pair"
		fillConfigMaps(t, p.Client(c), 3000)
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: pair-a}\nspec: {workspace: pair, toShard: shard-2}\n")
		framework.Eventually(t, 60*time.Second, "pair-a to have copied some rows", func() (bool, string) {
			out, _ := p.KubectlErr("root", "", "get", "workspacemove", "pair-a", "-o", "jsonpath={.status.step} {.status.phase}")
			return liveRows(t, target, c) > 0 || strings.Contains(out, "Succeeded"), out
		})
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: pair-b}\nspec: {workspace: pair, toShard: shard-2}\n")
		framework.Eventually(t, 60*time.Second, "pair-b to wait for pair-a (or pair-a done)", func() (bool, string) {
			b, _ := p.KubectlErr("root", "", "get", "workspacemove", "pair-b", "-o", "jsonpath={.status.phase} {.status.message}")
			a, _ := p.KubectlErr("root", "", "get", "workspacemove", "pair-a", "-o", "jsonpath={.status.phase}")
			return strings.Contains(b, "waiting for WorkspaceMove pair-a") || a == "Succeeded", "pair-b: " + b + "; pair-a: " + a
		})
		b := p.Kubectl("root", "get", "workspacemove", "pair-b", "-o", "jsonpath={.status.phase} {.status.message}")
		t.Logf("pair-b before it is deleted: %s", b)
		if strings.HasPrefix(b, "Failed") {
			t.Errorf("a second move of a workspace another move copies failed instead of waiting: %s", b)
		}
		p.Kubectl("root", "delete", "workspacemove", "pair-b", "--wait=true", "--timeout=60s")
		var out string
		framework.Eventually(t, 120*time.Second, "pair-a to end", func() (bool, string) {
			out, _ = p.KubectlErr("root", "", "get", "workspacemove", "pair-a", "-o", "jsonpath={.status.phase} {.status.message}")
			return strings.HasPrefix(out, "Succeeded ") || strings.HasPrefix(out, "Failed "), out
		})
		if !strings.HasPrefix(out, "Succeeded ") {
			t.Fatalf("pair-a after pair-b was withdrawn: %s", out)
		}
		list, err := target.Client(c).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cms := 0
		for _, cm := range list.Items {
			if strings.HasPrefix(cm.Name, "cm-") {
				cms++
			}
		}
		if cms != 3000 {
			t.Errorf("the new shard serves %d of the 3000 ConfigMaps after the move (the withdrawn second move must not delete the first's copy)", cms)
		}
	})

	t.Run("refused: the change history", func(t *testing.T) {
		const c = "root:hist"
		source.Stop()
		source.Args = append(source.Args, "--change-history")
		source.Start()
		p.Kubectl(c, "create", "configmap", "before", "-n", "default", "--from-literal=k=v")
		p.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceMove\nmetadata: {name: hist-to-2}\nspec: {workspace: hist, toShard: shard-2}\n")
		out := moveEnded(t, p, "hist-to-2", 60*time.Second)
		if !strings.HasPrefix(out, "Failed ") || !strings.Contains(out, "change history") {
			t.Errorf("moving a workspace whose shard records the change history: %q, want Failed naming the change history", out)
		}
		t.Logf("status: %s", out)
		if n := liveRows(t, target, c); n != 0 {
			t.Errorf("the new shard stores %d rows of %s after the refused move", n, c)
		}
		if fin := p.Kubectl("root", "get", "workspacemove", "hist-to-2", "-o", "jsonpath={.metadata.finalizers}"); fin != "" {
			t.Errorf("the failed WorkspaceMove keeps finalizers %s", fin)
		}
		writable(t, c, "after-refusal")
	})
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
