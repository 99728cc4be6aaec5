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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestOverflowSpillsAndShrinksBack is issue 55's ordered cluster groups on
// real physical clusters: an on-premises cluster (one kwok node with 2
// CPUs allocatable) is preferred over a cloud cluster. A Deployment whose
// pods request 500m fills on-prem (room for 4) and only the rest spills to
// the cloud; scaling down gives back the cloud's replicas first; a pod of
// someone else taking on-prem CPU sends replicas to the cloud, and they
// come back once it is gone. Bad groups are refused by kubectl.
func TestOverflowSpillsAndShrinksBack(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:team"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysicalWith(t, bins, physical.Options{Nodes: 1, CPU: "2"}, "onprem")
	for k, v := range startPhysical(t, bins, "cloud") {
		pcs[k] = v
	}
	down := map[string]*kubernetes.Clientset{}
	for name, site := range map[string]string{"onprem": "onprem", "cloud": "cloud"} {
		register(t, s, admin, name, "site="+site, pcs[name])
		down[name] = downClient(t, pcs[name])
	}
	waitTargetsReady(t, s, compute, "onprem", "cloud")

	// Groups kcp would not honour as written are refused.
	for _, bad := range []struct{ name, spec, want string }{
		{"Duplicate mode", `mode: Duplicate
  groups: [{name: a, selector: {matchLabels: {site: onprem}}}]`, "needs mode Divide"},
		{"no mode", `groups: [{name: a, selector: {matchLabels: {site: onprem}}}]`, "needs mode Divide"},
		{"an empty selector", `mode: Divide
  groups: [{name: a, selector: {}}]`, "empty selector"},
		{"with numberOfClusters", `mode: Divide
  numberOfClusters: 2
  groups: [{name: a, selector: {matchLabels: {site: onprem}}}]`, "do not combine"},
		{"with weights", `mode: Divide
  weights: [{selector: {site: cloud}, weight: 2}]
  groups: [{name: a, selector: {matchLabels: {site: onprem}}}]`, "do not combine"},
		{"an unknown field", `mode: Divide
  groups: [{name: a, selector: {matchLabels: {site: onprem}}, capacity: 3}]`, "unknown field"},
		{"a name twice", `mode: Divide
  groups: [{name: a, selector: {matchLabels: {site: onprem}}}, {name: a, selector: {matchLabels: {site: cloud}}}]`, "Duplicate value"},
		{"a bad operator", `mode: Divide
  groups: [{name: a, selector: {matchExpressions: [{key: site, operator: Near}]}}]`, "not a valid"},
	} {
		out, err := s.KubectlErr(team, "", "apply", "-f", framework.WriteFile(t, "bad.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: bad}
spec:
  locationWorkspace: "root:compute"
  namespaceSelector: {}
  `+bad.spec+"\n"))
		if err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("%s: want a refusal saying %q, got %v\n%s", bad.name, bad.want, err, out)
		}
	}
	if out, err := s.KubectlErr(team, "", "get", "placement", "bad"); err == nil {
		t.Fatalf("a refused Placement exists: %s", out)
	}

	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "overflow.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: onprem-first}
spec:
  locationWorkspace: "root:compute"
  namespaceSelector: {}
  mode: Divide
  groups:
  - {name: on-prem, selector: {matchLabels: {site: onprem}}}
  - {name: cloud, selector: {matchLabels: {site: cloud}}}
`))
	framework.Eventually(t, 30*time.Second, "the namespace on both groups' targets, the groups in the Placement's status", func() (bool, string) {
		targets := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		groups := s.Kubectl(team, "get", "placement", "onprem-first", "-o", `jsonpath={range .status.groups[*]}{.name}={.targets} {end}`)
		return targets == "root:compute/cloud,root:compute/onprem" && groups == `on-prem=["root:compute/onprem"] cloud=["root:compute/cloud"] `, targets + " | " + groups
	})

	ctx := context.Background()
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	// Every value each copy's spec.replicas takes, from its creation on:
	// a share that flapped on the way (a spill undone and redone) shows.
	histories := map[string]*replicaHistory{}
	for _, n := range []string{"onprem", "cloud"} {
		histories[n] = watchReplicas(t, down[n], ns, "web")
	}

	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "web.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx
        resources: {requests: {cpu: 500m, memory: 64Mi}}
`))
	// shares is what a user sees on the physical clusters: each one's
	// replicas of web and how many of them are available.
	shares := func() string {
		var parts []string
		for _, n := range []string{"onprem", "cloud"} {
			d, err := down[n].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				parts = append(parts, n+"=none")
				continue
			}
			parts = append(parts, fmt.Sprintf("%s=%d/%d", n, d.Status.AvailableReplicas, *d.Spec.Replicas))
		}
		return strings.Join(parts, " ")
	}
	waitShares := func(want string, replicas int) {
		t.Helper()
		framework.Eventually(t, 90*time.Second, want, func() (bool, string) {
			got := shares()
			ready := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.status.availableReplicas}/{.spec.replicas}")
			return got == want && ready == fmt.Sprintf("%d/%d", replicas, replicas), got + " | in kcp " + ready
		})
	}
	// 3 fit on-prem (room for 4): none in the cloud.
	waitShares("onprem=3/3 cloud=0/0", 3)

	// 7: on-prem is full at 4, the other 3 spill to the cloud.
	s.Kubectl(team, "scale", "deployment", "web", "--replicas=7")
	waitShares("onprem=4/4 cloud=3/3", 7)
	// Why they spilled: each share's status says its group and its room.
	ann := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.metadata.annotations}")
	if !strings.Contains(ann, `\"group\":\"on-prem\"`) || !strings.Contains(ann, `\"capacity\":4`) || !strings.Contains(ann, `\"group\":\"cloud\"`) {
		t.Errorf("the share status annotations do not say the groups and on-prem's room of 4: %s", ann)
	}
	// and the Deployment's Overflow condition says how it went.
	overflow := func(want string) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, "Overflow condition "+want, func() (bool, string) {
			got := s.Kubectl(team, "get", "deployment", "web", "-o", `jsonpath={.status.conditions[?(@.type=="Overflow")].status} {.status.conditions[?(@.type=="Overflow")].message}`)
			return strings.HasPrefix(got, want), got
		})
	}
	overflow("True on-prem: 4 (room for 4), full: the rest spills to the next group; cloud: 3 (room for ")

	// Down to 5: the cloud gives back first; down to 3: the cloud has none.
	s.Kubectl(team, "scale", "deployment", "web", "--replicas=5")
	waitShares("onprem=4/4 cloud=1/1", 5)
	s.Kubectl(team, "scale", "deployment", "web", "--replicas=3")
	waitShares("onprem=3/3 cloud=0/0", 3)
	overflow("False on-prem: 3 (room for 4); cloud: 0 (room for ")

	// Someone else's pod takes 500m on-prem: room for 3 of web there, so
	// at 5 replicas 2 spill; once it is gone (capacity frees up), the
	// cloud gives one back.
	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}},
	}
	if _, err := down["onprem"].CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the other pod scheduled on-prem", func() (bool, string) {
		p, err := down["onprem"].CoreV1().Pods("default").Get(ctx, "batch", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName != "", string(p.Status.Phase)
	})
	// Its syncer reports on-prem's smaller room (within seconds: it looks
	// again every 2), before the scale-up.
	overflow("False on-prem: 3 (room for 3); cloud: 0 (room for ")
	s.Kubectl(team, "scale", "deployment", "web", "--replicas=5")
	waitShares("onprem=3/3 cloud=2/2", 5)
	if err := down["onprem"].CoreV1().Pods("default").Delete(ctx, "batch", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitShares("onprem=4/4 cloud=1/1", 5)
	s.Kubectl(team, "scale", "deployment", "web", "--replicas=2")
	waitShares("onprem=2/2 cloud=0/0", 2)

	// Each copy went straight from one share to the next, nothing between.
	for n, want := range map[string]string{"onprem": "3 4 3 4 2", "cloud": "0 3 1 0 2 1 0"} {
		if got := histories[n].String(); got != want {
			t.Errorf("%s's share of web went %s, want %s", n, got, want)
		}
	}
}

// replicaHistory is every value a Deployment's spec.replicas took, each
// change once, as a watch saw them.
type replicaHistory struct {
	mu     sync.Mutex
	values []int32
}

func (h *replicaHistory) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Trim(fmt.Sprint(h.values), "[]")
}

// watchReplicas follows one Deployment of a physical cluster until the
// test ends.
func watchReplicas(t *testing.T, c *kubernetes.Clientset, namespace, name string) *replicaHistory {
	t.Helper()
	h := &replicaHistory{}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.AppsV1().Deployments(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || d.Spec.Replicas == nil {
				continue
			}
			h.mu.Lock()
			if len(h.values) == 0 || h.values[len(h.values)-1] != *d.Spec.Replicas {
				h.values = append(h.values, *d.Spec.Replicas)
			}
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return h
}
