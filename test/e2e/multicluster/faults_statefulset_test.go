package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

const scalingStatefulSet = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres}]}
`

// TestSyncerKilledWhileAStatefulSetScales: the syncer is killed (SIGKILL)
// right after it wrote a scale-up to the physical cluster, while the
// StatefulSet's pods come up one by one; the user scales down while it is
// dead. When it is back, the physical cluster runs what the workspace
// says, no more pods than that, and kcp's status and projected pods say
// so: `kubectl rollout status` completes with the replicas the user asked
// for last. Then `rollout history` and `rollout undo` of the StatefulSet.
func TestSyncerKilledWhileAStatefulSetScales(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:sts-fault"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	p := register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	down := downClient(t, pcs["pc1"])
	placeAll(t, s, team, compute, "pc1")
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()

	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "sts.yaml", scalingStatefulSet))
	if out, err := s.KubectlErr(team, "", "rollout", "status", "statefulset/db", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status of the first replica: %v\n%s", err, out)
	}

	s.Kubectl(team, "scale", "statefulset/db", "--replicas=5")
	framework.Eventually(t, 30*time.Second, "the scale-up to reach the physical cluster", func() (bool, string) {
		sts, err := down.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return *sts.Spec.Replicas == 5, fmt.Sprint(*sts.Spec.Replicas)
	})
	p.stop() // SIGKILL, while the physical cluster starts pods 1 to 4 in order
	s.Kubectl(team, "scale", "statefulset/db", "--replicas=2")
	if sts, err := down.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{}); err != nil || *sts.Spec.Replicas != 5 {
		t.Fatalf("with the syncer dead, something else changed the physical cluster's StatefulSet: %v %v", sts, err)
	}

	p.start()
	framework.Eventually(t, 90*time.Second, "the physical cluster to run 2 replicas, no more", func() (bool, string) {
		sts, err := down.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := down.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		return *sts.Spec.Replicas == 2 && sts.Status.ReadyReplicas == 2 && len(pods.Items) == 2,
			fmt.Sprintf("spec %d, ready %d, pods %v", *sts.Spec.Replicas, sts.Status.ReadyReplicas, names)
	})
	if out, err := s.KubectlErr(team, "", "rollout", "status", "statefulset/db", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status after the syncer came back: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "kcp's status and pods to show 2 replicas", func() (bool, string) {
		st := s.Kubectl(team, "get", "statefulset", "db", "-o", "jsonpath={.spec.replicas}/{.status.replicas}/{.status.readyReplicas}")
		pods := strings.Fields(s.Kubectl(team, "get", "pods", "-l", "app=db", "-o", `jsonpath={range .items[*]}{.metadata.name} {end}`))
		return st == "2/2/2" && strings.Join(pods, ",") == "db-0,db-1", "spec/replicas/ready " + st + ", pods " + strings.Join(pods, ",")
	})

	// A StatefulSet's history is its ControllerRevisions, projected from
	// the physical cluster: `rollout history` and `rollout undo` work as on
	// a cluster, and an undo writes the tenant's template back, not what
	// the syncer adds to run the pods against the workspace.
	s.Kubectl(team, "set", "image", "statefulset/db", "db=postgres:18")
	if out, err := s.KubectlErr(team, "", "rollout", "status", "statefulset/db", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "two revisions", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "rollout", "history", "statefulset/db")
		return err == nil && strings.Contains(out, "\n1 ") && strings.Contains(out, "\n2 "), out
	})
	if out, err := s.KubectlErr(team, "", "rollout", "undo", "statefulset/db"); err != nil {
		t.Fatalf("rollout undo: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "the first image back, in kcp and downstream", func() (bool, string) {
		got := s.Kubectl(team, "get", "statefulset", "db", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		sts, err := down.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got += " " + sts.Spec.Template.Spec.Containers[0].Image
		return got == "postgres postgres", got
	})
	tmpl := s.Kubectl(team, "get", "statefulset", "db", "-o", "jsonpath={.spec.template.spec}")
	if strings.Contains(tmpl, "KUBERNETES_SERVICE_HOST") || strings.Contains(tmpl, "kcp-api-access") || strings.Contains(tmpl, "automountServiceAccountToken") {
		t.Errorf("rollout undo wrote the syncer's additions into the tenant's StatefulSet: %s", tmpl)
	}
	if out, err := s.KubectlErr(team, "", "rollout", "status", "statefulset/db", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status after undo: %v\n%s", err, out)
	}
}
