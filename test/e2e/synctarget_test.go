package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestSyncTargetHeartbeat registers a real physical cluster (kube-apiserver,
// kcm, scheduler, KWOK nodes) as a SyncTarget in an infrastructure
// workspace and runs the syncer binary beside it: the SyncTarget becomes
// Ready with the cluster's version and capacity, shows in `kubectl get
// synctargets`, stays invisible to other workspaces, and turns NotReady
// when the syncer stops.
func TestSyncTargetHeartbeat(t *testing.T) {
	bins, err := physical.EnsureBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s")
	const compute = "root:compute"
	s.CreateWorkspaces(compute, "root:other")
	s.Kubectl(compute, "apply", "-f", writeFile(t, "st.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: SyncTarget
metadata:
  name: pc1
  labels: {region: eu}
`))
	ready := func() (status, reason string, st workload.SyncTarget) {
		out := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", "json")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, c := range st.Status.Conditions {
			if c.Type == workload.ConditionReady {
				return string(c.Status), c.Reason, st
			}
		}
		return "", "", st
	}
	framework.Eventually(t, 30*time.Second, "a SyncTarget without a syncer to be Ready=Unknown", func() (bool, string) {
		st, reason, _ := ready()
		return st == "Unknown" && reason == workload.ReasonNeverHeard, st + " " + reason
	})

	pc, err := physical.Start(context.Background(), bins, physical.Options{Name: "pc1", Dir: t.TempDir(), Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Stop)

	// The syncer's kubeconfig for kcp points at the compute workspace.
	cfg, err := clientcmd.LoadFromFile(s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Clusters["root"].Server = s.URL() + "/clusters/" + compute
	kcpConfig := filepath.Join(t.TempDir(), "kcp.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kcpConfig); err != nil {
		t.Fatal(err)
	}
	syncer := exec.Command(filepath.Join(framework.RepoRoot(), "bin", "syncer"), "--kcp-kubeconfig", kcpConfig, "--sync-target", "pc1",
		"--kubeconfig", pc.Kubeconfig, "--heartbeat-interval", "1s")
	logf, _ := os.Create(filepath.Join(t.TempDir(), "syncer.log"))
	syncer.Stdout, syncer.Stderr = logf, logf
	if err := syncer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syncer.Process.Kill(); syncer.Wait() })

	framework.Eventually(t, 30*time.Second, "the SyncTarget to be Ready with the cluster's version and capacity", func() (bool, string) {
		status, _, st := ready()
		cpu := st.Status.Allocatable.Cpu()
		return status == "True" && st.Status.KubernetesVersion == physical.KubernetesVersion && st.Status.ReadyNodes == 3 && cpu.Value() == 96,
			status + " " + st.Status.KubernetesVersion + " nodes " + cpu.String()
	})
	table := s.Kubectl(compute, "get", "synctargets")
	if !strings.Contains(table, "pc1") || !strings.Contains(table, "True") || !strings.Contains(table, physical.KubernetesVersion) || !strings.Contains(table, "HEARTBEAT") {
		t.Errorf("kubectl get synctargets:\n%s", table)
	}
	if out, err := s.KubectlErr("root:other", "", "get", "synctarget", "pc1"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("another workspace sees the SyncTarget of %s: %v\n%s", compute, err, out)
	}

	// The syncer stops: NotReady after the timeout.
	syncer.Process.Kill()
	syncer.Wait()
	framework.Eventually(t, 30*time.Second, "the SyncTarget to be NotReady once heartbeats stop", func() (bool, string) {
		status, reason, _ := ready()
		return status == "False" && reason == workload.ReasonHeartbeatTimeout, status + " " + reason
	})
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
