package shards

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestLeastFullShard: with kcp start --workspace-shard-policy=least-full, a
// new workspace that names no shard goes to the shard holding the fewest
// workspaces, so a burst of creations spreads evenly; a shard that is down
// is not chosen; a policy that does not exist is refused at start.
func TestLeastFullShard(t *testing.T) {
	in := framework.StartShards(t, []string{"", ""}, 1, "--workspace-shard-policy=least-full")
	p0 := in.Proxies[0]
	create := func(name string) string {
		t.Helper()
		p0.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: "+name+"}\n")
		framework.Eventually(t, 60*time.Second, "workspace root:"+name+" Ready", func() (bool, string) {
			out, _ := p0.KubectlErr("root", "", "get", "workspace", name, "-o", "jsonpath={.status.phase} {.status.conditions[0].message}")
			return strings.HasPrefix(out, "Ready"), out
		})
		return p0.Kubectl("root", "get", "workspace", name, "-o", "jsonpath={.spec.shard}")
	}
	// The shard recorded is the one that holds it: its own API serves the
	// workspace, the other's refuses it.
	holds := func(name, shard string) {
		t.Helper()
		for s, srv := range in.Shards {
			_, err := srv.KubectlErr("root:"+name, "", "get", "namespace", "default")
			if (s == shard) != (err == nil) {
				t.Errorf("workspace %s recorded on %s: shard %s serves it: %v", name, shard, s, err == nil)
			}
		}
	}

	per := map[string]int{}
	for i := range 6 {
		name := fmt.Sprintf("spread-%d", i)
		shard := create(name)
		per[shard]++
		holds(name, shard)
	}
	if per["root"] != 3 || per["shard-1"] != 3 {
		t.Errorf("six new workspaces on two empty shards went %v, want 3 on each", per)
	}

	// A workspace that names its shard still goes there.
	p0.KubectlApply("root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: named}\nspec: {shard: shard-1}\n")
	if got := p0.Kubectl("root", "get", "workspace", "named", "-o", "jsonpath={.spec.shard}"); got != "shard-1" {
		t.Errorf("a workspace naming shard-1 was recorded on %q", got)
	}

	// shard-1 down: after the counts are asked again (10 s), new workspaces
	// go to the shard that answers, and are Ready.
	in.Shards["shard-1"].Stop()
	time.Sleep(11 * time.Second)
	for i := range 2 {
		name := fmt.Sprintf("while-down-%d", i)
		if shard := create(name); shard != "root" {
			t.Errorf("with shard-1 down, %s went to %q, want root", name, shard)
		}
	}
	in.Shards["shard-1"].Start()

	// A policy that does not exist stops kcp at start with the ones that do.
	kcp, _ := framework.Binaries(t)
	out, err := exec.Command(kcp, "start", "--root-dir", t.TempDir(), "--secure-port", fmt.Sprint(framework.FreePort(t)),
		"--shards-file", in.ShardsFile, "--shard-name", "root", "--workspace-shard-policy", "fullest").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--workspace-shard-policy "fullest" is not one of: parent, least-full`) {
		t.Errorf("kcp start with --workspace-shard-policy fullest: %v\n%s", err, out)
	}
}
