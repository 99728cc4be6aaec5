package multicluster

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s")
	const compute = "root:compute"
	s.CreateWorkspaces(compute, "root:other")
	// Registration with the plugin, from inside the compute workspace.
	dir := t.TempDir()
	adminCopy := adminIn(t, s, compute)
	kcpConfig, manifest := filepath.Join(dir, "pc1-syncer.kubeconfig"), filepath.Join(dir, "syncer-pc1.yaml")
	out, err := s.KubectlPlugin(adminCopy, "kcp", "workload", "sync", "pc1", "--labels", "region=eu,provider=laptop",
		"-o", manifest, "--kcp-kubeconfig-out", kcpConfig)
	if err != nil || !strings.Contains(out, "syncer --kcp-kubeconfig "+kcpConfig+" --sync-target pc1") {
		t.Fatalf("kubectl kcp workload sync: %v\n%s", err, out)
	}
	if labels := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", "jsonpath={.metadata.labels}"); !strings.Contains(labels, `"region":"eu"`) {
		t.Errorf("SyncTarget labels: %s", labels)
	}
	if out, err := s.KubectlPlugin(adminCopy, "kcp", "workload", "sync", "Bad_Name"); err == nil || !strings.Contains(out, "Bad_Name") {
		t.Errorf("an invalid SyncTarget name: want a clear error, got %v\n%s", err, out)
	}
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

	// The manifest for the physical cluster applies there (KWOK runs any
	// image, so its Deployment even becomes Available).
	if out, err := exec.Command(filepath.Join(framework.RepoRoot(), "bin", "kubectl"), "--kubeconfig", pc.Kubeconfig,
		"apply", "-f", manifest).CombinedOutput(); err != nil {
		t.Errorf("applying the syncer manifest to the physical cluster: %v\n%s", err, out)
	}

	// The syncer runs with the credential the plugin wrote.
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

	// The syncer's credential reads its SyncTarget and writes its status,
	// nothing else.
	s.Kubectl(compute, "apply", "-f", framework.WriteFile(t, "pc2.yaml", "apiVersion: workload.kcp.io/v1alpha1\nkind: SyncTarget\nmetadata: {name: pc2}\n"))
	kubectl := filepath.Join(framework.RepoRoot(), "bin", "kubectl")
	asSyncer := func(args ...string) (string, error) {
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kcpConfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, attempt := range [][]string{
		{"get", "secrets", "-A"},
		{"get", "synctarget", "pc2"},
		{"label", "synctarget", "pc1", "hacked=yes"},
		{"get", "synctargets"},
		{"create", "namespace", "syncer-was-here"},
		{"--server", s.URL() + "/clusters/root:other", "get", "synctargets"},
		{"--server", s.URL() + "/clusters/*", "get", "synctargets"},
		{"--server", s.URL() + "/clusters/root", "get", "namespaces"},
	} {
		if out, err := asSyncer(attempt...); err == nil || !(strings.Contains(out, "Forbidden") || strings.Contains(out, "forbidden") || strings.Contains(out, "provide credentials")) {
			t.Errorf("the syncer's credential: %v answered %v:\n%s", attempt, err, out)
		}
	}
	if out, err := asSyncer("get", "synctarget", "pc1"); err != nil {
		t.Errorf("the syncer's credential cannot read its own SyncTarget: %v\n%s", err, out)
	}

	// The syncer stops: NotReady after the timeout.
	syncer.Process.Kill()
	syncer.Wait()
	framework.Eventually(t, 30*time.Second, "the SyncTarget to be NotReady once heartbeats stop", func() (bool, string) {
		status, reason, _ := ready()
		return status == "False" && reason == workload.ReasonHeartbeatTimeout, status + " " + reason
	})
}
