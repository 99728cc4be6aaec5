package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/physical"
)

var (
	rolloutOnly = flag.Bool("rollout", false, "only measure progressive rollouts (Placement spec.rollout): three physical clusters in three groups (wave label), the time from a new image until each group runs it available and until kubectl rollout status would succeed, without a rollout and with minAvailableSeconds 0 and 5")
	rolloutRuns = flag.Int("rollout-runs", 3, "image changes per setting in the rollout benchmark")
)

// rolloutSetting is one workspace of the rollout benchmark: its
// Placement's spec.rollout (nil: none).
type rolloutSetting struct {
	name, workspace string
	rollout         map[string]interface{}
}

var rolloutSettings = []rolloutSetting{
	{name: "no rollout (every cluster at once)", workspace: "nowave"},
	{name: "rollout, groupByLabel wave, minAvailableSeconds 0", workspace: "wave0",
		rollout: map[string]interface{}{"groupByLabel": "wave", "minAvailableSeconds": 0, "progressDeadlineSeconds": 120}},
	{name: "rollout, groupByLabel wave, minAvailableSeconds 5", workspace: "wave5",
		rollout: map[string]interface{}{"groupByLabel": "wave", "minAvailableSeconds": 5, "progressDeadlineSeconds": 120}},
}

type rolloutResult struct {
	setting string
	// groups[i] are the times from the new image until cluster i (wave
	// i+1) runs it available; done until kcp's summed status says the
	// rollout is complete (what kubectl rollout status waits for).
	groups [3][]time.Duration
	done   []time.Duration
	// leastGap is the least time, over runs, between a group running the
	// new image available and the next group's cluster getting it
	// (negative: before).
	leastGap time.Duration
}

func benchRollout(log func(string, ...any)) ([]rolloutResult, error) {
	bins, err := physical.EnsureBinaries(log)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "kcp-bench-rollout-")
	if err != nil {
		return nil, err
	}
	if os.Getenv("KCP_BENCH_KEEP") == "" {
		defer os.RemoveAll(tmp)
	}
	ctx := context.Background()
	names := []string{"pc1", "pc2", "pc3"}
	down := map[string]*kubernetes.Clientset{}
	pcs := map[string]*physical.Cluster{}
	for _, n := range names {
		pc, err := physical.Start(ctx, bins, physical.Options{Name: n, Dir: filepath.Join(tmp, n), Log: log})
		if err != nil {
			return nil, err
		}
		defer pc.Stop()
		pcs[n] = pc
		if down[n], err = pc.Client(); err != nil {
			return nil, err
		}
	}
	s := &server{dir: filepath.Join(tmp, "kcp"), port: freePort()}
	if _, err := s.start(); err != nil {
		return nil, err
	}
	defer s.stop()
	pairs := [][2]string{{"root", "compute"}}
	for _, st := range rolloutSettings {
		pairs = append(pairs, [2]string{"root", st.workspace})
	}
	if err := s.createWorkspaces(pairs); err != nil {
		return nil, err
	}
	kubeconfig, err := s.computeKubeconfig(tmp)
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		cfg := filepath.Join(tmp, n+"-syncer.kubeconfig")
		if err := plugin(kubeconfig, "workload", "sync", n, "--labels", fmt.Sprintf("wave=%d", i+1), "--kcp-kubeconfig-out", cfg); err != nil {
			return nil, err
		}
		cmd, err := startSyncer(tmp, n, cfg, pcs[n].Kubeconfig)
		if err != nil {
			return nil, err
		}
		defer stopProcess(cmd)
	}
	waitUntil := func(what string, timeout time.Duration, ok func() bool) error {
		t0 := time.Now()
		for !ok() {
			if time.Since(t0) > timeout {
				return fmt.Errorf("%s: not after %s (logs in %s with KCP_BENCH_KEEP=1)", what, timeout, tmp)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}
	var out []rolloutResult
	for _, setting := range rolloutSettings {
		ws := "root:" + setting.workspace
		extra := map[string]interface{}{"allClusters": true}
		if setting.rollout != nil {
			extra["rollout"] = setting.rollout
		}
		if err := placeAndDeploy(s, ws, extra, 2); err != nil {
			return nil, err
		}
		c, err := s.client(ws)
		if err != nil {
			return nil, err
		}
		ns := syncer.DownstreamNamespace(logicalcluster.Name(ws), "default")
		// has: pc's copy has image; runs: and runs it available.
		has := func(pc, image string) (bool, bool) {
			d, err := down[pc].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil || d.Spec.Template.Spec.Containers[0].Image != image {
				return false, false
			}
			return true, d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.AvailableReplicas == 2 && d.Status.Replicas == 2
		}
		runs := func(pc, image string) bool {
			_, ok := has(pc, image)
			return ok
		}
		complete := func() bool {
			d, err := c.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
			return err == nil && rolledOut(d)
		}
		if err := waitUntil(ws+": web on three clusters", 3*time.Minute, func() bool {
			n, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err == nil && strings.Count(n.Annotations[workload.AssignedTargetAnnotation], ",") == 2 &&
				runs("pc1", "nginx") && runs("pc2", "nginx") && runs("pc3", "nginx") && complete()
		}); err != nil {
			return nil, err
		}
		r := rolloutResult{setting: setting.name, leastGap: time.Hour}
		for run := 0; run < *rolloutRuns; run++ {
			image := fmt.Sprintf("nginx:%d", run+2)
			patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"web","image":%q}]}}}}`, image)
			t0 := time.Now()
			if _, err := c.AppsV1().Deployments("default").Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return nil, err
			}
			var at, got [3]time.Duration
			if err := waitUntil(ws+": "+image+" rolled out", 5*time.Minute, func() bool {
				for i, pc := range names {
					if at[i] > 0 {
						continue
					}
					h, ok := has(pc, image)
					if h && got[i] == 0 {
						got[i] = time.Since(t0)
					}
					if ok {
						at[i] = time.Since(t0)
					}
				}
				return at[0] > 0 && at[1] > 0 && at[2] > 0 && complete()
			}); err != nil {
				return nil, err
			}
			done := time.Since(t0)
			for i := range at {
				r.groups[i] = append(r.groups[i], at[i])
			}
			r.done = append(r.done, done)
			r.leastGap = min(r.leastGap, got[1]-at[0], got[2]-at[1])
			log("  %s: %s available on pc1 %s, pc2 %s, pc3 %s; rollout complete in kcp after %s", setting.name, image,
				at[0].Round(100*time.Millisecond), at[1].Round(100*time.Millisecond), at[2].Round(100*time.Millisecond), done.Round(100*time.Millisecond))
		}
		out = append(out, r)
	}
	return out, nil
}

// rolledOut is what kubectl rollout status checks for success.
func rolledOut(d *appsv1.Deployment) bool {
	st := d.Status
	return st.ObservedGeneration >= d.Generation && d.Spec.Replicas != nil && st.UpdatedReplicas == *d.Spec.Replicas &&
		st.Replicas == st.UpdatedReplicas && st.AvailableReplicas == st.UpdatedReplicas
}

func printRollout(rs []rolloutResult) {
	fmt.Println("| setting | runs | new image -> available on pc1 (group 1), p50 | on pc2 (group 2), p50 | on pc3 (group 3), p50 | -> rollout complete in kcp, p50 / max | least time from a group available to the next one's new image |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Printf("| %s | %d | %s | %s | %s | %s / %s | %s |\n", r.setting, len(r.done),
			median(r.groups[0]).Round(100*time.Millisecond), median(r.groups[1]).Round(100*time.Millisecond), median(r.groups[2]).Round(100*time.Millisecond),
			median(r.done).Round(100*time.Millisecond), maxDuration(r.done).Round(100*time.Millisecond), r.leastGap.Round(100*time.Millisecond))
	}
}
