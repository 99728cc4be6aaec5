package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestProgressiveRollout: a Placement's spec.rollout rolls a Deployment's
// new spec out to three physical clusters one group (wave label) at a
// time: a cluster gets the new image only after the previous one runs it
// available. A bad image (pods never ready) stops the rollout after the
// first cluster: the others keep the old image, the Deployment's
// Progressing condition is False (ProgressDeadlineExceeded) naming the
// cluster and why, and kubectl rollout status fails. A fixed image starts
// a new rollout that completes.
func TestProgressiveRollout(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:waves"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	names := []string{"pc1", "pc2", "pc3"}
	pcs := startPhysical(t, bins, names...)
	down := map[string]kubernetes.Interface{}
	for i, name := range names {
		register(t, s, admin, name, fmt.Sprintf("wave=%d", i+1), pcs[name])
		down[name] = downClient(t, pcs[name])
	}
	waitTargetsReady(t, s, compute, names...)

	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: waves}
spec:
  locationWorkspace: "root:compute"
  namespaceSelector: {}
  allClusters: true
  rollout: {groupByLabel: wave, minAvailableSeconds: 3, progressDeadlineSeconds: 25}
`))
	framework.Eventually(t, 60*time.Second, "the namespace on all three clusters with the rollout in its policy", func() (bool, string) {
		got := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target} {.metadata.annotations.workload\.kcp\.io/placement}`)
		return strings.HasPrefix(got, "root:compute/pc1,root:compute/pc2,root:compute/pc3 ") && strings.Contains(got, `"rollout":`), got
	})
	time.Sleep(3 * time.Second) // the syncers see the policy through their own watches

	// A new Deployment goes everywhere at once: nothing older runs anywhere.
	s.Kubectl(team, "create", "deployment", "web", "--image=nginx:1.0", "--replicas=2")
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("the first rollout: %v\n%s", err, out)
	}
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()
	get := func(pc string) (*appsv1.Deployment, error) {
		return down[pc].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	}
	image := func(pc string) string {
		d, err := get(pc)
		if err != nil {
			return err.Error()
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}
	framework.Eventually(t, 30*time.Second, "nginx:1.0 on the three clusters", func() (bool, string) {
		got := image("pc1") + " " + image("pc2") + " " + image("pc3")
		return got == "nginx:1.0 nginx:1.0 nginx:1.0", got
	})

	// A good image, group by group. Each poll notes when a cluster first
	// shows the new image and when it first runs it available.
	s.Kubectl(team, "set", "image", "deployment/web", "nginx=nginx:2.0")
	seen, available := map[string]int{}, map[string]int{}
	sawProgress := ""
	for poll := 0; len(available) < 3; poll++ {
		if poll > 600 {
			t.Fatalf("the good rollout did not reach every cluster: new image seen %v, available %v", seen, available)
		}
		for _, pc := range names {
			d, err := get(pc)
			if err != nil || d.Spec.Template.Spec.Containers[0].Image != "nginx:2.0" {
				continue
			}
			if _, ok := seen[pc]; !ok {
				seen[pc] = poll
			}
			st := d.Status
			if _, ok := available[pc]; !ok && st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == 2 && st.AvailableReplicas == 2 && st.Replicas == 2 {
				available[pc] = poll
			}
		}
		// kcp's summed status says the rollout is complete (what kubectl
		// rollout status checks) only once every cluster runs it.
		up, err := s.KubectlErr(team, "", "get", "deployment", "web", "-o", `jsonpath={.metadata.generation}/{.status.observedGeneration}/{.status.updatedReplicas}/{.status.availableReplicas}/{.status.replicas}|{.status.conditions[?(@.type=="Progressing")].message}`)
		if err != nil {
			t.Fatalf("%v\n%s", err, up)
		}
		counts, msg, _ := strings.Cut(up, "|")
		if strings.Contains(msg, "progressive rollout of generation") {
			sawProgress = msg
		}
		if f := strings.Split(counts, "/"); len(seen) < 3 && f[0] == f[1] && f[2] == "2" && f[3] == "2" && f[4] == "2" {
			t.Fatalf("kcp says the rollout is complete (%s) while only %v run the new image", counts, seen)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !(available["pc1"] < seen["pc2"] && available["pc2"] < seen["pc3"]) {
		t.Errorf("the new image reached a cluster before the previous one ran it available (poll numbers): seen %v, available %v", seen, available)
	}
	if seen["pc2"] == seen["pc1"] || seen["pc3"] == seen["pc2"] {
		t.Errorf("two clusters got the new image at once: %v", seen)
	}
	if !strings.Contains(sawProgress, "group") {
		t.Errorf("the Deployment's Progressing condition never said where the rollout was")
	}
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=60s"); err != nil {
		t.Fatalf("rollout status after the good rollout: %v\n%s", err, out)
	}
	if got := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.status.updatedReplicas}/{.status.availableReplicas}"); got != "2/2" {
		t.Errorf("summed status after the good rollout: updated/available %s, want 2/2", got)
	}

	// A bad image: pods that never become ready. The rollout stops after
	// the first cluster; the others keep nginx:2.0.
	s.Kubectl(team, "set", "image", "deployment/web", "nginx="+physical.NeverReadyImage)
	framework.Eventually(t, 90*time.Second, "Progressing=False ProgressDeadlineExceeded naming pc1", func() (bool, string) {
		got := s.Kubectl(team, "get", "deployment", "web", "-o", `jsonpath={.status.conditions[?(@.type=="Progressing")].status}|{.status.conditions[?(@.type=="Progressing")].reason}|{.status.conditions[?(@.type=="Progressing")].message}`)
		return strings.HasPrefix(got, "False|ProgressDeadlineExceeded|") && strings.Contains(got, "group 1 of 3 (root:compute/pc1)") &&
			strings.Contains(got, "root:compute/pc1: 1 of 2 replicas updated, 2 available, 1 unavailable") && strings.Contains(got, "root:compute/pc2, root:compute/pc3 keep the previous spec"), got
	})
	// A tenant cannot release the held clusters by forging kcp's rollout
	// state on the Deployment, through the object or its status: what it
	// writes there is dropped (kcp's keys), and they keep the old image.
	s.Kubectl(team, "create", "serviceaccount", "dev")
	s.Kubectl(team, "create", "clusterrolebinding", "dev-admin", "--clusterrole=cluster-admin", "--serviceaccount=default:dev")
	token := strings.TrimSpace(s.Kubectl(team, "create", "token", "dev"))
	asDev := func(args ...string) (string, error) {
		full := append([]string{"--kubeconfig", os.DevNull, "--server", s.URL() + "/clusters/" + team, "--insecure-skip-tls-verify", "--token", token}, args...)
		out, err := exec.Command(filepath.Join(framework.RepoRoot(), "bin", "kubectl"), full...).CombinedOutput()
		return string(out), err
	}
	stateBefore := s.Kubectl(team, "get", "deployment", "web", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/rollout}`)
	gen := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.metadata.generation}")
	forged := fmt.Sprintf(`{"generation":%s,"groups":[["%s","%s","%s"]],"current":0,"releasedAt":"2026-01-01T00:00:00Z"}`, gen,
		workload.TargetKey(compute, "pc1"), workload.TargetKey(compute, "pc2"), workload.TargetKey(compute, "pc3"))
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"annotations": map[string]string{workload.RolloutAnnotation: forged}}})
	for _, sub := range []string{"", "status"} {
		args := []string{"patch", "deployment", "web", "--type=merge", "-p", string(patch)}
		if sub != "" {
			args = append(args, "--subresource="+sub)
		}
		if out, err := asDev(args...); err != nil && !strings.Contains(out, "are kcp's") {
			t.Errorf("forging the rollout state (%q): %v\n%s", sub, err, out)
		}
		if got := s.Kubectl(team, "get", "deployment", "web", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/rollout}`); got != stateBefore {
			t.Errorf("a tenant changed kcp's rollout state (%q): %s", sub, got)
		}
	}
	if img := image("pc1"); img != physical.NeverReadyImage {
		t.Errorf("pc1, the first group, runs %s, want the bad image", img)
	}
	holdsFor(t, 5*time.Second, "the clusters after the stopped group keep the old image", func() (bool, string) {
		got := image("pc2") + " " + image("pc3")
		return got == "nginx:2.0 nginx:2.0", got
	})
	out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=30s")
	if err == nil || !strings.Contains(out, "exceeded its progress deadline") {
		t.Errorf("rollout status of the stopped rollout: want it to fail with the deadline, got %v\n%s", err, out)
	}
	if got := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.status.updatedReplicas}"); got != "" && got != "0" { // 0 is left out of the JSON
		t.Errorf("summed updatedReplicas of the stopped rollout: %s, want 0 (two clusters run the old spec)", got)
	}

	// A fix starts a new rollout, which completes everywhere.
	s.Kubectl(team, "set", "image", "deployment/web", "nginx=nginx:3.0")
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("rollout status after the fix: %v\n%s", err, out)
	}
	for _, pc := range names {
		if img := image(pc); img != "nginx:3.0" {
			t.Errorf("%s runs %s after the fixed rollout, want nginx:3.0", pc, img)
		}
	}
}

// TestRolloutSettingsRefused: a Placement with rollout settings that
// cannot mean anything is refused by kubectl with a clear message.
func TestRolloutSettingsRefused(t *testing.T) {
	s := framework.StartServer(t, "")
	const team = "root:waves"
	s.CreateWorkspaces("root:compute", team)
	// Bad settings are refused at admission, each with a clear message.
	for _, row := range []struct{ rollout, want string }{
		{`{maxConcurrency: 0}`, "must be a number of at least 1 or a percentage"},
		{`{maxConcurrency: "150%"}`, "must be a number of at least 1 or a percentage"},
		{`{maxConcurrency: "half"}`, "must be a number of at least 1 or a percentage"},
		{`{minAvailableSeconds: -1}`, "spec.rollout.minAvailableSeconds"},
		{`{progressDeadlineSeconds: 0}`, "spec.rollout.progressDeadlineSeconds"},
	} {
		out, err := s.KubectlErr(team, "", "apply", "-f", framework.WriteFile(t, "bad.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: bad}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, rollout: `+row.rollout+`}
`))
		if err == nil || !strings.Contains(out, row.want) {
			t.Errorf("rollout %s: want a refusal saying %q, got %v\n%s", row.rollout, row.want, err, out)
		}
	}
	if out, err := s.KubectlErr(team, "", "apply", "-f", framework.WriteFile(t, "bad.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: bad}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, mode: Divide, rollout: {}}
`)); err == nil || !strings.Contains(out, "rollout works with mode Duplicate only") {
		t.Errorf("rollout with Divide: want a refusal, got %v\n%s", err, out)
	}

	// Good settings are accepted.
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "good.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: good}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, rollout: {maxConcurrency: "34%", groupByLabel: wave, minAvailableSeconds: 0, progressDeadlineSeconds: 1}}
`))
	s.Kubectl(team, "patch", "placement", "good", "--type=merge", "-p", `{"spec":{"rollout":{"maxConcurrency":2}}}`)
}
