package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestProjection is issue 52 scope 1 and issue 51 scopes 2-3 on two real
// physical clusters: team-a's Deployment runs duplicated on pc1 and pc2,
// and what they run (Pods, ReplicaSets, ControllerRevisions, Endpoints,
// EndpointSlices, Events) is seen in team-a as on a cluster, read-only.
// team-b is placed on pc1 only.
func TestProjection(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, teamA, teamB = "root:compute", "root:team-a", "root:team-b"
	s.CreateWorkspaces(compute, teamA, teamB)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	syncers := map[string]*syncerProc{}
	down := map[string]*kubernetes.Clientset{}
	for _, name := range []string{"pc1", "pc2"} {
		syncers[name] = register(t, s, admin, name, "name="+name, pcs[name])
		down[name] = downClient(t, pcs[name])
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for name, p := range syncers {
			raw, _ := os.ReadFile(p.kubeconfig + ".log")
			var lines []string
			for _, l := range strings.Split(string(raw), "\n") {
				if strings.Contains(l, "projection") || strings.Contains(l, "project") {
					lines = append(lines, l)
				}
			}
			t.Logf("%s's syncer on projection:\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	})
	s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "both.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: both}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true}
`))
	s.Kubectl(teamB, "apply", "-f", framework.WriteFile(t, "pc1.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: pc1}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, locationSelector: {matchLabels: {name: pc1}}}
`))
	framework.Eventually(t, 30*time.Second, "team-a on both, team-b on pc1", func() (bool, string) {
		a := s.Kubectl(teamA, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		b := s.Kubectl(teamB, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1,root:compute/pc2" && b == "root:compute/pc1", a + " | " + b
	})
	ctx := context.Background()
	nsA := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default")

	s.Kubectl(teamA, "create", "deployment", "web", "--image=nginx", "--replicas=2")
	s.Kubectl(teamA, "expose", "deployment", "web", "--port=80")
	if out, err := s.KubectlErr(teamA, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status: %v\n%s", err, out)
	}

	type pod struct {
		name, cluster, from string
	}
	pods := func() []pod {
		var list struct {
			Items []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(s.Kubectl(teamA, "get", "pods", "-l", "app=web", "-o", "json")), &list); err != nil {
			t.Fatal(err)
		}
		var out []pod
		for _, i := range list.Items {
			out = append(out, pod{i.Metadata.Name, i.Metadata.Annotations[workload.PhysicalClusterAnnotation], i.Metadata.Labels[workload.ProjectedFromLabel]})
		}
		return out
	}
	downPods := func(pc string) map[string]bool {
		l, err := down[pc].CoreV1().Pods(nsA).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				out[p.Name] = true
			}
		}
		return out
	}

	t.Run("pods of both clusters in the user's namespace", func(t *testing.T) {
		framework.Eventually(t, 60*time.Second, "every replica of both clusters projected", func() (bool, string) {
			want := map[string]string{}
			for _, pc := range []string{"pc1", "pc2"} {
				for n := range downPods(pc) {
					want[n] = "root:compute/" + pc
				}
			}
			got := pods()
			ok := len(want) == 4 && len(got) == 4
			for _, p := range got {
				ok = ok && want[p.name] == p.cluster && p.from == workload.TargetKey(compute, strings.TrimPrefix(p.cluster, "root:compute/"))
			}
			return ok, s.Kubectl(teamA, "get", "pods", "-o", "wide", "--show-labels")
		})
		wide := s.Kubectl(teamA, "get", "pods", "-o", "wide")
		if !strings.Contains(wide, "Running") || !strings.Contains(wide, "NODE") {
			t.Errorf("kubectl get pods -o wide:\n%s", wide)
		}
	})

	t.Run("events of the physical clusters", func(t *testing.T) {
		framework.Eventually(t, 60*time.Second, "a Scheduled event of a web pod", func() (bool, string) {
			out := s.Kubectl(teamA, "get", "events", "--field-selector", "involvedObject.kind=Pod", "-o",
				`jsonpath={range .items[*]}{.reason} {.involvedObject.namespace}/{.involvedObject.name}{"\n"}{end}`)
			return strings.Contains(out, "Scheduled default/web-"), out
		})
		p := pods()[0]
		framework.Eventually(t, 30*time.Second, "describe pod shows its events", func() (bool, string) {
			out := s.Kubectl(teamA, "describe", "pod", p.name)
			return strings.Contains(out, "Scheduled") && strings.Contains(out, workload.PhysicalClusterAnnotation), out
		})
	})

	t.Run("endpoints and endpointslices", func(t *testing.T) {
		framework.Eventually(t, 60*time.Second, "the Service's Endpoints and EndpointSlices", func() (bool, string) {
			out, _ := s.KubectlErr(teamA, "", "get", "endpoints,endpointslices", "-l", "", "-o",
				`jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.labels.kubernetes\.io/service-name}{"\n"}{end}`)
			return strings.Contains(out, "Endpoints/web") && strings.Count(out, "EndpointSlice/web-") >= 2, out
		})
	})

	t.Run("rollout history and undo", func(t *testing.T) {
		s.Kubectl(teamA, "set", "image", "deployment/web", "nginx=nginx:1.27")
		if out, err := s.KubectlErr(teamA, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
			t.Fatalf("rollout status: %v\n%s", err, out)
		}
		framework.Eventually(t, 60*time.Second, "two revisions", func() (bool, string) {
			out, err := s.KubectlErr(teamA, "", "rollout", "history", "deployment/web")
			return err == nil && strings.Contains(out, "\n1 ") && strings.Contains(out, "\n2 "), out
		})
		if out, err := s.KubectlErr(teamA, "", "rollout", "undo", "deployment/web"); err != nil {
			t.Fatalf("rollout undo: %v\n%s", err, out)
		}
		framework.Eventually(t, 60*time.Second, "the first image back, in kcp and on both clusters", func() (bool, string) {
			got := s.Kubectl(teamA, "get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
			for _, pc := range []string{"pc1", "pc2"} {
				d, err := down[pc].AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				got += " " + d.Spec.Template.Spec.Containers[0].Image
			}
			return got == "nginx nginx nginx", got
		})
		if out, err := s.KubectlErr(teamA, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
			t.Fatalf("rollout status after undo: %v\n%s", err, out)
		}
	})

	t.Run("kubectl delete pod restarts it downstream", func(t *testing.T) {
		var victim pod
		framework.Eventually(t, 60*time.Second, "4 pods projected", func() (bool, string) {
			ps := pods()
			for _, p := range ps {
				if p.cluster == "root:compute/pc1" {
					victim = p
				}
			}
			return len(ps) == 4 && victim.name != "", s.Kubectl(teamA, "get", "pods", "-o", "wide")
		})
		before := downPods("pc1")
		if !before[victim.name] {
			t.Fatalf("%s is not on pc1: %v", victim.name, before)
		}
		s.Kubectl(teamA, "delete", "pod", victim.name, "--wait=false")
		framework.Eventually(t, 60*time.Second, "the pod replaced on pc1 and the new one projected", func() (bool, string) {
			now := downPods("pc1")
			var fresh string
			for n := range now {
				if !before[n] {
					fresh = n
				}
			}
			if now[victim.name] || fresh == "" {
				return false, "downstream: " + strings.Join(keys(now), ",")
			}
			for _, p := range pods() {
				if p.name == fresh && p.cluster == "root:compute/pc1" {
					return true, ""
				}
			}
			return false, s.Kubectl(teamA, "get", "pods", "-o", "wide")
		})
	})

	t.Run("projections are never synced down", func(t *testing.T) {
		for _, pc := range []string{"pc1", "pc2"} {
			l, err := down[pc].CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: workload.ProjectedFromLabel})
			if err != nil || len(l.Items) != 0 {
				t.Errorf("%s has copies of projections: %v %d", pc, err, len(l.Items))
			}
		}
		out := s.Kubectl(teamA, "get", "pods", "-o", "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels} {.metadata.finalizers}{\"\\n\"}{end}")
		if strings.Contains(out, workload.StateLabelPrefix) || strings.Contains(out, workload.FinalizerPrefix) {
			t.Errorf("projected pods are assigned:\n%s", out)
		}
	})

	t.Run("deleting the Deployment removes its projections", func(t *testing.T) {
		s.Kubectl(teamA, "delete", "deployment", "web")
		framework.Eventually(t, 90*time.Second, "no pods, replicasets of web left in team-a", func() (bool, string) {
			out := s.Kubectl(teamA, "get", "pods,replicasets", "-l", "app=web", "-o", "name")
			return strings.TrimSpace(out) == "", out
		})
	})
}

// TestProjectionWritesAreGuarded: who may write projections, without a
// physical cluster (two SyncTargets registered with the real kubectl kcp
// workload sync, heartbeats written by the test): team-a is placed on pc1
// only. pc1's syncer writes a projection through its view; pc2's cannot
// write into team-a, nor change or delete pc1's projection, nor list it;
// the projection is never assigned (never synced down); a tenant can
// neither create a ReplicaSet nor forge or change a projection.
func TestProjectionWritesAreGuarded(t *testing.T) {
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=1h")
	const compute, teamA = "root:compute", "root:team-a"
	s.CreateWorkspaces(compute, teamA)
	admin := adminIn(t, s, compute)
	creds := map[string]string{}
	for _, name := range []string{"pc1", "pc2"} {
		creds[name] = filepath.Join(t.TempDir(), name+"-syncer.kubeconfig")
		if out, err := s.KubectlPlugin(admin, "kcp", "workload", "sync", name, "--kcp-kubeconfig-out", creds[name], "--labels", "name="+name); err != nil {
			t.Fatalf("kubectl kcp workload sync %s: %v\n%s", name, err, out)
		}
		fakeHeartbeat(t, s, compute, name)
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "pc1.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: pc1}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, locationSelector: {matchLabels: {name: pc1}}}
`))
	framework.Eventually(t, 30*time.Second, "team-a's default on pc1", func() (bool, string) {
		a := s.Kubectl(teamA, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1", a
	})
	pc1, location := syncerClient(t, creds["pc1"])
	pc2, _ := syncerClient(t, creds["pc2"])
	k1, k2 := workload.TargetKey(compute, "pc1"), workload.TargetKey(compute, "pc2")
	view := func(target string) string { return "/services/syncer/" + location + "/" + target + "/clusters/" }
	pods := "/api/v1/namespaces/default/pods"
	// What pc1's syncer sends: a Pod of its cluster, labelled as another
	// target's and assigned, to see what the view makes of it.
	forged := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web","` + workload.ProjectedFromLabel + `":"` + k2 + `","` +
		workload.StateLabelPrefix + k2 + `":"Sync"},"finalizers":["` + workload.FinalizerPrefix + k2 + `"]},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"nginx"}]}}`

	t.Run("a syncer writes projections only where its target runs", func(t *testing.T) {
		if code, body := pc2.do("POST", view("pc2")+teamA+pods, "application/json", forged); code != 403 || !strings.Contains(body, "not assigned") {
			t.Errorf("pc2 writing a pod into team-a (placed on pc1 only): %d %s", code, body)
		}
		if code, body := pc1.do("POST", view("pc1")+teamA+pods, "application/json", forged); code != 201 {
			t.Fatalf("pc1 projecting a pod into team-a: %d %s", code, body)
		}
		meta, _ := kcpMeta(t, s, teamA, "pod", "web-1")
		if meta.Labels[workload.ProjectedFromLabel] != k1 || meta.Labels[workload.StateLabelPrefix+k2] != "" || meta.Labels[workload.StateLabelPrefix+k1] != "" || len(meta.Finalizers) != 0 {
			t.Errorf("the projection as stored: labels %v finalizers %v", meta.Labels, meta.Finalizers)
		}
		raw := s.Kubectl(teamA, "get", "pod", "web-1", "-o", "json")
		if code, body := pc2.do("PUT", view("pc2")+teamA+pods+"/web-1", "application/json", raw); code != 404 {
			t.Errorf("pc2 updating pc1's projection: %d %s", code, body)
		}
		if code, body := pc2.do("DELETE", view("pc2")+teamA+pods+"/web-1", "", ""); code != 404 {
			t.Errorf("pc2 deleting pc1's projection: %d %s", code, body)
		}
		if code, body := pc2.do("GET", view("pc2")+"*/api/v1/pods?labelSelector="+workload.ProjectedFromLabel+"%3D"+k1, "", ""); code != 200 || strings.Contains(body, "web-1") {
			t.Errorf("pc2 listing pc1's projections: %d %s", code, body)
		}
		if code, body := pc1.do("GET", view("pc1")+"*/api/v1/pods?labelSelector="+workload.ProjectedFromLabel, "", ""); code != 200 || !strings.Contains(body, "web-1") {
			t.Errorf("pc1 listing its projections: %d %s", code, body)
		}
		// A tenant's own objects are no syncer's to change or delete.
		s.Kubectl(teamA, "create", "configmap", "tenants")
		s.Kubectl(teamA, "run", "mine", "--image=nginx")
		if code, body := pc1.do("DELETE", view("pc1")+teamA+pods+"/mine", "", ""); code != 404 {
			t.Errorf("pc1 deleting a tenant's pod: %d %s", code, body)
		}
		mine := s.Kubectl(teamA, "get", "pod", "mine", "-o", "json")
		if code, body := pc1.do("PUT", view("pc1")+teamA+pods+"/mine", "application/json", mine); code != 404 {
			t.Errorf("pc1 updating a tenant's pod: %d %s", code, body)
		}
		if code, body := pc1.do("POST", view("pc1")+teamA+"/api/v1/namespaces/default/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`); code != 403 {
			t.Errorf("pc1 creating a configmap: %d %s", code, body)
		}
		// pc1 removes its own projection.
		if code, body := pc1.do("DELETE", view("pc1")+teamA+pods+"/web-1", "application/json", `{"gracePeriodSeconds":0}`); code != 200 {
			t.Errorf("pc1 deleting its projection: %d %s", code, body)
		}
		if code, body := pc1.do("POST", view("pc1")+teamA+pods, "application/json", forged); code != 201 {
			t.Fatalf("pc1 projecting again: %d %s", code, body)
		}
	})

	t.Run("projections are never assigned", func(t *testing.T) {
		// The Placement's controller labels what runs on pc1, never the
		// projection (the tenant's pod mine is assigned).
		framework.Eventually(t, 30*time.Second, "the tenant's pod assigned", func() (bool, string) {
			meta, _ := kcpMeta(t, s, teamA, "pod", "mine")
			return meta.Labels[workload.StateLabelPrefix+k1] == "Sync", fmt.Sprint(meta.Labels)
		})
		if code, body := pc1.do("GET", view("pc1")+"*/api/v1/pods", "", ""); code != 200 || strings.Contains(body, `"web-1"`) || !strings.Contains(body, `"mine"`) {
			t.Errorf("pc1's view of what to run: %d %s", code, body)
		}
		meta, _ := kcpMeta(t, s, teamA, "pod", "web-1")
		if meta.Labels[workload.StateLabelPrefix+k1] != "" || len(meta.Finalizers) != 0 {
			t.Errorf("the projection is assigned: %v %v", meta.Labels, meta.Finalizers)
		}
	})

	t.Run("projections are read-only for tenants", func(t *testing.T) {
		s.GrantAccess("root", "alice", "team-a")
		s.Kubectl(teamA, "create", "clusterrolebinding", "alice-admin", "--clusterrole=cluster-admin", "--user=alice")
		rs := `apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: mine}
spec:
  selector: {matchLabels: {app: mine}}
  template:
    metadata: {labels: {app: mine}}
    spec: {containers: [{name: c, image: nginx}]}
`
		if out, err := s.KubectlErr(teamA, rs, "--as=alice", "create", "-f", "-"); err == nil || !strings.Contains(out, "read-only") || !strings.Contains(out, "Deployment") {
			t.Errorf("alice creating a ReplicaSet: want a refusal that explains itself, got %v\n%s", err, out)
		}
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "create", "configmap", "forged"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "label", "configmap", "forged", workload.ProjectedFromLabel+"="+k1); err == nil || !strings.Contains(out, "read-only") {
			t.Errorf("alice labelling a ConfigMap as a projection: want a refusal, got %v\n%s", err, out)
		}
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "label", "pod", "web-1", "mine=yes"); err == nil || !strings.Contains(out, "read-only") {
			t.Errorf("alice labelling a projected pod: want a refusal, got %v\n%s", err, out)
		}
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "label", "pod", "web-1", workload.ProjectedFromLabel+"-"); err == nil || !strings.Contains(out, "read-only") {
			t.Errorf("alice removing the projected-from label: want a refusal, got %v\n%s", err, out)
		}
		// Deleting a projected pod is allowed (how users restart one).
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "delete", "pod", "web-1", "--wait=false"); err != nil {
			t.Errorf("alice deleting a projected pod: %v\n%s", err, out)
		}
	})
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
