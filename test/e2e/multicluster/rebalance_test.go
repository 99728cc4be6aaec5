package multicluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestRebalanceAndSyncerDeath is issue 16's rebalancing and the death of
// a syncer alone, on two real physical clusters: a Deployment divided by
// the capacity the syncers report (3 and 3 replicas on equal clusters)
// goes to 2 and 4 when one cluster doubles its nodes, and the Deployment
// in kcp never has fewer than its 6 replicas available on the way (pods
// take minReadySeconds to count, so a share that shrank before its
// replacement was available would show). Then only that cluster's syncer
// is killed: its share moves to the other cluster. When the syncer comes
// back its stale copy goes, and the cluster joins again the same way:
// never below 6 available.
func TestRebalanceAndSyncerDeath(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=6s", "--placement-eviction-delay=2s")
	const compute, team = "root:compute", "root:team"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	syncers := map[string]*syncerProc{}
	down := map[string]*kubernetes.Clientset{}
	for _, name := range []string{"pc1", "pc2"} {
		syncers[name] = register(t, s, admin, name, "tier=compute", pcs[name])
		down[name] = downClient(t, pcs[name])
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")

	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "capacity.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: by-capacity}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, mode: Divide, weightsFrom: Capacity}
`))
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "web.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 6
  minReadySeconds: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: nginx, image: nginx}]}
`))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	shares := func() map[string]int32 {
		out := map[string]int32{}
		for _, n := range []string{"pc1", "pc2"} {
			if d, err := down[n].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{}); err == nil {
				out[n] = *d.Spec.Replicas
			}
		}
		return out
	}
	whole := func() string {
		return s.Kubectl(team, "get", "deployment", "web", "-o", `jsonpath={.status.readyReplicas}/{.spec.replicas} available {.status.availableReplicas} {.status.conditions[?(@.type=="Available")].status}`)
	}
	rebalanced := func(want string) func() (bool, string) {
		return func() (bool, string) {
			got, w := fmt.Sprint(shares()), whole()
			pol := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/placement}`)
			return got == want && w == "6/6 available 6 True" && !strings.Contains(pol, `"previous"`), got + " | " + w + " | " + pol
		}
	}
	framework.Eventually(t, 90*time.Second, "equal clusters, equal shares", rebalanced("map[pc1:3 pc2:3]"))

	avail := watchAvailability(ctx, t, s.Client(team), "default", "web")

	// pc2 doubles its nodes: its syncer reports twice pc1's capacity, and
	// the shares go to 2 and 4 without a dip.
	avail.arm()
	started := time.Now()
	if err := pcs["pc2"].AddNodes(ctx, 3); err != nil {
		t.Fatal(err)
	}
	most := int32(0)
	framework.Eventually(t, 90*time.Second, "shares 2 and 4 after pc2 doubled", func() (bool, string) {
		sh := shares()
		most = max(most, sh["pc1"]+sh["pc2"])
		return rebalanced("map[pc1:2 pc2:4]")()
	})
	t.Logf("rebalancing after a capacity change: %s (at most %d replicas downstream on the way)", time.Since(started).Round(100*time.Millisecond), most)
	avail.check(t, "the capacity change", 6)

	// Only pc2's syncer dies; the cluster runs on. After the heartbeat
	// timeout and the eviction delay pc1 runs all 6.
	stale, err := down["pc2"].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syncers["pc2"].stop()
	killed := time.Now()
	framework.Eventually(t, 90*time.Second, "pc1 runs all 6", func() (bool, string) {
		d, err := down["pc1"].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		assigned := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		w := whole()
		return assigned == "root:compute/pc1" && *d.Spec.Replicas == 6 && d.Status.AvailableReplicas == 6 && w == "6/6 available 6 True",
			fmt.Sprintf("assigned %s, pc1 %d/%d available, in kcp %s", assigned, d.Status.AvailableReplicas, *d.Spec.Replicas, w)
	})
	t.Logf("failover after pc2's syncer died: %s", time.Since(killed).Round(100*time.Millisecond))
	if _, err := down["pc2"].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Logf("pc2 still runs its copy while its syncer is away (nothing can reach it to remove it)")
	}

	// The syncer comes back: the stale copy goes first (CaughtUp), then pc2
	// joins and gets 4 again, with pc1 keeping 6 until those are available.
	avail.arm()
	back := time.Now()
	syncers["pc2"].start()
	framework.Eventually(t, 120*time.Second, "pc2 back with a new copy and its share", func() (bool, string) {
		d, err := down["pc2"].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if d.UID == stale.UID {
			return false, "pc2 still has the stale copy"
		}
		return rebalanced("map[pc1:2 pc2:4]")()
	})
	t.Logf("pc2 rejoined and rebalanced %s after its syncer restarted", time.Since(back).Round(100*time.Millisecond))
	avail.check(t, "pc2's return", 6)
	if out := s.Kubectl(compute, "get", "synctarget", "pc2", "-o", `jsonpath={.status.conditions[?(@.type=="CaughtUp")].status}`); out != "True" {
		t.Errorf("pc2's CaughtUp condition: %q", out)
	}
}

// availability follows a Deployment in kcp with a watch and records, while
// armed, the fewest available replicas and any time it was not Available.
type availability struct {
	mu          sync.Mutex
	armed       bool
	least       int32
	unavailable string
	events      int
	leastAt     string
}

func watchAvailability(ctx context.Context, t *testing.T, c kubernetes.Interface, namespace, name string) *availability {
	a := &availability{}
	see := func(d *appsv1.Deployment) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.armed {
			return
		}
		a.events++
		if d.Status.AvailableReplicas < a.least {
			a.least = d.Status.AvailableReplicas
			a.leastAt = fmt.Sprintf("generation %d, labels %v, annotations %v", d.Generation, d.Labels, d.Annotations)
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status != corev1.ConditionTrue && a.unavailable == "" {
				a.unavailable = fmt.Sprintf("%s: %s (%d available)", c.Reason, c.Message, d.Status.AvailableReplicas)
			}
		}
	}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	go func() {
		for ctx.Err() == nil {
			list, err := c.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for i := range list.Items {
				see(&list.Items[i])
			}
			w, err := c.AppsV1().Deployments(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				if d, ok := ev.Object.(*appsv1.Deployment); ok {
					see(d)
				}
			}
			w.Stop()
		}
	}()
	return a
}

func (a *availability) arm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed, a.least, a.unavailable, a.events = true, 1<<30, "", 0
}

// check disarms and fails the test if the Deployment had fewer than want
// available, or was not Available, since arm.
func (a *availability) check(t *testing.T, during string, want int32) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed = false
	t.Logf("during %s: %d updates of the Deployment in kcp, at least %d available", during, a.events, a.least)
	if a.least < want {
		t.Errorf("during %s the Deployment had only %d available, fewer than its %d: %s", during, a.least, want, a.leastAt)
	}
	if a.unavailable != "" {
		t.Errorf("during %s the Deployment was not Available: %s", during, a.unavailable)
	}
}
