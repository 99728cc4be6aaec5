package multicluster

import (
	"context"
	"encoding/json"
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
// team-b is placed on pc1 only (for the syncer rows).
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
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "label", "configmap", "forged", workload.ProjectedFromLabel+"="+workload.TargetKey(compute, "pc1")); err == nil || !strings.Contains(out, "read-only") {
			t.Errorf("alice labelling a ConfigMap as a projection: want a refusal, got %v\n%s", err, out)
		}
		p := pods()[0]
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "label", "pod", p.name, "mine=yes"); err == nil || !strings.Contains(out, "read-only") {
			t.Errorf("alice labelling a projected pod: want a refusal, got %v\n%s", err, out)
		}
		if out, err := s.KubectlErr(teamA, "", "--as=alice", "label", "pod", p.name, workload.ProjectedFromLabel+"-"); err == nil || !strings.Contains(out, "read-only") {
			t.Errorf("alice removing the projected-from label: want a refusal, got %v\n%s", err, out)
		}
	})

	t.Run("a syncer writes projections only where its target runs", func(t *testing.T) {
		pc2, location := syncerClient(t, syncers["pc2"].kubeconfig)
		view := "/services/syncer/" + location + "/pc2/clusters/"
		pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"forged","labels":{"` + workload.ProjectedFromLabel + `":"` + workload.TargetKey(compute, "pc2") + `"}},"spec":{"containers":[{"name":"c","image":"evil"}]}}`
		// team-b runs on pc1 only.
		if code, body := pc2.do("POST", view+teamB+"/api/v1/namespaces/default/pods", "application/json", pod); code < 400 {
			t.Errorf("pc2 writing a pod into team-b: %d %s", code, body)
		}
		if out, _ := s.KubectlErr(teamB, "", "get", "pod", "forged"); !strings.Contains(out, "NotFound") {
			t.Errorf("team-b has a forged pod: %s", out)
		}
		// pc1's projection in team-a is not pc2's to change or delete.
		var victim string
		for _, p := range pods() {
			if p.cluster == "root:compute/pc1" {
				victim = p.name
			}
		}
		raw := s.Kubectl(teamA, "get", "pod", victim, "-o", "json")
		if code, body := pc2.do("PUT", view+teamA+"/api/v1/namespaces/default/pods/"+victim, "application/json", raw); code != 404 {
			t.Errorf("pc2 updating pc1's projection: %d %s", code, body)
		}
		if code, body := pc2.do("DELETE", view+teamA+"/api/v1/namespaces/default/pods/"+victim, "", ""); code != 404 {
			t.Errorf("pc2 deleting pc1's projection: %d %s", code, body)
		}
		// A tenant's own objects are not a syncer's either.
		s.Kubectl(teamA, "create", "configmap", "tenants")
		if code, body := pc2.do("DELETE", view+teamA+"/api/v1/namespaces/default/events/whatever", "", ""); code != 404 {
			t.Errorf("pc2 deleting a tenant's event: %d %s", code, body)
		}
		// Listing another target's projections shows nothing.
		if code, body := pc2.do("GET", view+"*/api/v1/pods?labelSelector="+workload.ProjectedFromLabel+"%3D"+workload.TargetKey(compute, "pc1"), "", ""); code != 200 || strings.Contains(body, `"name":"web-`) {
			t.Errorf("pc2 listing pc1's projections: %d %s", code, body)
		}
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

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
