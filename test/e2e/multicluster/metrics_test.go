package multicluster

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestPodMetrics is issue 52's kubectl top in pull mode: two physical
// clusters serve metrics.k8s.io (kwok's simulated kubelet resource
// metrics, scraped by the real metrics-server behind the cluster's
// aggregator); team A and team B divide a Deployment of the same name in
// the same namespace over both. In each workspace kubectl top pods shows
// exactly its own pods, from both clusters, with the usage their pods
// have (set per team through kwok's usage annotations); kubectl top pod
// NAME too. Security rows: team B never sees team A's pod metrics; a user
// without list on pods.metrics.k8s.io is refused by kcp and allowed once
// a Role grants it; the downstream namespace is no name in the
// workspace; the syncer's tunnel forwards only pod metrics of its own
// namespaces (not another namespace's, not node metrics). kubectl top
// nodes is refused with a message saying why. A cluster without
// metrics.k8s.io: a workspace placed only there gets "metrics not
// available: ... does not serve metrics.k8s.io"; one placed there and on
// a cluster with metrics gets the other's pods and a warning.
func TestPodMetrics(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, teamA, teamB, teamC = "root:compute", "root:team-a", "root:team-b", "root:team-c"
	s.CreateWorkspaces(compute, teamA, teamB, teamC)
	admin := adminIn(t, s, compute)
	pcs := startMetricsClusters(t, bins, "pc1", "pc2")
	register(t, s, admin, "pc1", "region=eu,tier=one", pcs["pc1"])
	register(t, s, admin, "pc2", "region=eu,tier=two", pcs["pc2"])
	waitTargetsReady(t, s, compute, "pc1", "pc2")

	usage := map[string][2]string{teamA: {"150m", "60Mi"}, teamB: {"400m", "200Mi"}}
	for _, team := range []string{teamA, teamB} {
		s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "`+compute+`", namespaceSelector: {}, allClusters: true, mode: Divide}
`))
		framework.Eventually(t, 60*time.Second, team+": default placed on pc1 and pc2", func() (bool, string) {
			a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
			return strings.Contains(a, compute+"/pc1") && strings.Contains(a, compute+"/pc2"), a
		})
		s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "web.yaml", fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {%s: %s, %s: %s}
    spec: {containers: [{name: nginx, image: nginx}]}
`, physical.UsageCPUAnnotation, usage[team][0], physical.UsageMemoryAnnotation, usage[team][1])))
	}
	// The pods each workspace shows, by name, with their clusters.
	podsOf := map[string]map[string]string{}
	for _, team := range []string{teamA, teamB} {
		framework.Eventually(t, 120*time.Second, team+": a Running pod of web on each cluster", func() (bool, string) {
			out := s.Kubectl(team, "get", "pods", "-l", "app=web", "--field-selector=status.phase=Running", "-o",
				`jsonpath={range .items[*]}{.metadata.name}={.metadata.annotations.workload\.kcp\.io/physical-cluster}{"\n"}{end}`)
			pods := map[string]string{}
			clusters := map[string]bool{}
			for _, l := range strings.Fields(out) {
				name, cluster, _ := strings.Cut(l, "=")
				pods[name] = cluster
				clusters[cluster] = true
			}
			podsOf[team] = pods
			return len(pods) == 2 && clusters[compute+"/pc1"] && clusters[compute+"/pc2"], out
		})
	}

	// kubectl top pods: each workspace its own pods, from both clusters,
	// with their usage.
	for _, team := range []string{teamA, teamB} {
		wantCPU, wantMem := usage[team][0], usage[team][1]
		framework.Eventually(t, 4*physical.MetricResolution+90*time.Second, team+": kubectl top pods", func() (bool, string) {
			out, err := s.KubectlErr(team, "", "top", "pods")
			if err != nil {
				time.Sleep(2 * time.Second)
				return false, fmt.Sprintf("%v: %s", err, out)
			}
			rows := topRows(out)
			if len(rows) != len(podsOf[team]) {
				time.Sleep(2 * time.Second)
				return false, out
			}
			for name, row := range rows {
				if _, ok := podsOf[team][name]; !ok {
					return false, "a pod that is not the workspace's: " + name + "\n" + out
				}
				if !near(row[0], wantCPU) || row[1] != wantMem {
					time.Sleep(2 * time.Second)
					return false, out
				}
			}
			t.Logf("%s: kubectl top pods:\n%s", team, out)
			return true, out
		})
	}
	names := func(team string) []string {
		var out []string
		for n := range podsOf[team] {
			out = append(out, n)
		}
		sort.Strings(out)
		return out
	}
	for _, name := range names(teamB) {
		if _, ok := podsOf[teamA][name]; ok {
			t.Fatalf("both teams have a pod %s: the test cannot tell them apart", name)
		}
	}

	t.Run("top pod NAME, selectors and all namespaces", func(t *testing.T) {
		name := names(teamA)[0]
		out := s.Kubectl(teamA, "top", "pod", name)
		if rows := topRows(out); len(rows) != 1 || !near(rows[name][0], usage[teamA][0]) {
			t.Errorf("kubectl top pod %s: %s", name, out)
		}
		// Team B's pod is no name in team A.
		out, err := s.KubectlErr(teamA, "", "top", "pod", names(teamB)[0])
		if err == nil || !strings.Contains(out, "not found") {
			t.Errorf("kubectl top pod of team B's pod in team A: %v %s", err, out)
		}
		if rows := topRows(s.Kubectl(teamA, "top", "pods", "-l", "app=web")); len(rows) != 2 {
			t.Errorf("kubectl top pods -l app=web: %v", rows)
		}
		if out := s.Kubectl(teamA, "top", "pods", "-l", "app=other"); len(topRows(out)) != 0 {
			t.Errorf("kubectl top pods -l app=other: %s", out)
		}
		out = s.Kubectl(teamA, "top", "pods", "-A", "--containers")
		for _, n := range names(teamA) {
			if !strings.Contains(out, n) {
				t.Errorf("kubectl top pods -A --containers misses %s: %s", n, out)
			}
		}
		for _, n := range names(teamB) {
			if strings.Contains(out, n) {
				t.Errorf("kubectl top pods -A in team A shows team B's %s: %s", n, out)
			}
		}
	})

	t.Run("kubectl top nodes is refused in a workspace", func(t *testing.T) {
		out, err := s.KubectlErr(teamA, "", "top", "nodes")
		t.Logf("kubectl top nodes: %s", out)
		if err == nil || !strings.Contains(out, "node metrics are not served in a workspace") {
			t.Errorf("kubectl top nodes: %v %s", err, out)
		}
		if strings.Contains(out, "pc1-node") {
			t.Errorf("kubectl top nodes shows the physical cluster's nodes: %s", out)
		}
	})

	t.Run("RBAC decides: list on pods.metrics.k8s.io", func(t *testing.T) {
		s.Kubectl(teamA, "create", "role", "pods-only", "--verb=get,list,watch", "--resource=pods")
		s.Kubectl(teamA, "create", "rolebinding", "eve-pods", "--role=pods-only", "--user=eve")
		s.Kubectl("root", "create", "clusterrole", "access-team-a", "--verb=access", "--resource=workspaces/content", "--resource-name=team-a")
		s.Kubectl("root", "create", "clusterrolebinding", "access-team-a", "--clusterrole=access-team-a", "--user=eve")
		eve := userKubeconfig(t, s, teamA, "eve")
		framework.Eventually(t, 30*time.Second, "eve lists pods", func() (bool, string) {
			out, err := kubectlAs(t, eve, "", "get", "pods")
			return err == nil && strings.Contains(out, names(teamA)[0]), out
		})
		out, err := kubectlAs(t, eve, "", "top", "pods")
		if err == nil || !strings.Contains(out, "forbidden") || !strings.Contains(out, "pods.metrics.k8s.io") || strings.Contains(out, names(teamA)[0]) {
			t.Errorf("eve's kubectl top pods without list on pods.metrics.k8s.io: %v %s", err, out)
		}
		s.Kubectl(teamA, "create", "role", "pod-metrics", "--verb=get,list", "--resource=pods.metrics.k8s.io")
		s.Kubectl(teamA, "create", "rolebinding", "eve-metrics", "--role=pod-metrics", "--user=eve")
		framework.Eventually(t, 30*time.Second, "eve's kubectl top pods once a Role grants it", func() (bool, string) {
			out, err := kubectlAs(t, eve, "", "top", "pods")
			return err == nil && len(topRows(out)) == 2, out
		})
	})

	t.Run("the downstream namespace is no name in the workspace", func(t *testing.T) {
		dns := syncer.DownstreamNamespace(logicalcluster.Name(teamB), "default")
		out, err := s.KubectlErr(teamA, "", "top", "pods", "-n", dns)
		if err == nil || !strings.Contains(out, "not placed on any SyncTarget") {
			t.Errorf("kubectl top pods -n <team B's downstream namespace> in team A: %v %s", err, out)
		}
		for _, n := range names(teamB) {
			if strings.Contains(out, n) {
				t.Errorf("team B's pod metrics came through: %s", out)
			}
		}
	})

	t.Run("the tunnel forwards pod metrics of the syncer's namespaces only", func(t *testing.T) {
		srv := tunnelServer(t, pcs["pc1"], compute, "pc1")
		dns := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default")
		for _, c := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/apis/metrics.k8s.io/v1beta1/namespaces/" + dns + "/pods", http.StatusOK},
			{"GET", "/apis/metrics.k8s.io/v1beta1/namespaces/" + dns + "/pods?watch=true", http.StatusOK},
			{"POST", "/apis/metrics.k8s.io/v1beta1/namespaces/" + dns + "/pods", http.StatusForbidden},
			{"GET", "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods", http.StatusForbidden},
			{"GET", "/apis/metrics.k8s.io/v1beta1/pods", http.StatusForbidden},
			{"GET", "/apis/metrics.k8s.io/v1beta1/nodes", http.StatusForbidden},
			{"GET", "/apis/metrics.k8s.io/v1beta1/namespaces/" + dns + "/pods/../../../nodes", http.StatusForbidden},
		} {
			code, body := tunnelRequest(t, srv, c.method, c.path)
			if code != c.want {
				t.Errorf("%s %s through the tunnel: %d %s, want %d", c.method, c.path, code, body, c.want)
			}
			// watch=true is dropped: a list, not a stream.
			if c.want == http.StatusOK && !strings.Contains(body, `"kind":"PodMetricsList"`) {
				t.Errorf("%s %s through the tunnel: %s", c.method, c.path, body)
			}
		}
	})

	t.Run("a cluster without metrics.k8s.io", func(t *testing.T) {
		// pc2 stops serving metrics.k8s.io: its APIService goes.
		cfg, err := pcs["pc2"].RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		agg, err := aggregatorclient.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := agg.ApiregistrationV1().APIServices().Delete(context.Background(), "v1beta1.metrics.k8s.io", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		const notServed = "metrics not available: the physical cluster of SyncTarget pc2 in root:compute does not serve metrics.k8s.io"
		// Team C runs on pc2 only: an error saying so.
		s.Kubectl(teamC, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: two}
spec: {locationWorkspace: "`+compute+`", namespaceSelector: {}, locationSelector: {matchLabels: {tier: two}}}
`))
		framework.Eventually(t, 60*time.Second, "team C's default placed on pc2", func() (bool, string) {
			a := s.Kubectl(teamC, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
			return a == compute+"/pc2", a
		})
		s.Kubectl(teamC, "create", "deployment", "web", "--image=nginx")
		framework.Eventually(t, 60*time.Second, "team C's kubectl top pods says pc2 does not serve metrics", func() (bool, string) {
			began := time.Now()
			out, err := s.KubectlErr(teamC, "", "top", "pods")
			if took := time.Since(began); took > 30*time.Second {
				t.Errorf("kubectl top pods took %s", took)
			}
			return err != nil && strings.Contains(out, notServed), out
		})
		out, _ := s.KubectlErr(teamC, "", "top", "pods")
		t.Logf("team C: kubectl top pods: %s", out)
		// Team A runs on both: pc1's pods, and a warning about pc2.
		framework.Eventually(t, 60*time.Second, "team A's kubectl top pods: pc1's pods and a warning", func() (bool, string) {
			out, err := s.KubectlErr(teamA, "", "top", "pods")
			if err != nil || !strings.Contains(out, "Warning: "+notServed) {
				return false, fmt.Sprintf("%v %s", err, out)
			}
			rows := topRows(out)
			for name, cluster := range podsOf[teamA] {
				_, shown := rows[name]
				if shown != (cluster == compute+"/pc1") {
					return false, out
				}
			}
			if len(rows) == 1 {
				t.Logf("team A: kubectl top pods with pc2 not serving metrics:\n%s", out)
			}
			return len(rows) == 1, out
		})
	})
}

// startMetricsClusters starts physical clusters that serve
// metrics.k8s.io, one node each, side by side; they stop with the test.
func startMetricsClusters(t *testing.T, bins physical.Binaries, names ...string) map[string]*physical.Cluster {
	t.Helper()
	return startPhysicalWith(t, bins, physical.Options{Nodes: 1, Metrics: true}, names...)
}

// topRows parses kubectl top pods: name -> CPU, memory (the last
// container's with --containers). Lines that are no rows (the header,
// warnings) are skipped.
func topRows(out string) map[string][2]string {
	rows := map[string][2]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] == "NAME" || f[0] == "NAMESPACE" || strings.HasPrefix(l, "Warning:") || strings.HasPrefix(l, "No resources") || strings.HasPrefix(l, "error") || strings.HasPrefix(l, "Error") {
			continue
		}
		if len(f) == 3 {
			rows[f[0]] = [2]string{f[1], f[2]}
		} else {
			// -A: NAMESPACE NAME ...; --containers: POD NAME CPU MEMORY.
			rows[f[len(f)-3]] = [2]string{f[len(f)-2], f[len(f)-1]}
		}
	}
	return rows
}

// near says a CPU reading (millicores) is within 20% of what the pod's
// usage annotation sets (kwok's cumulative counter over metrics-server's
// window).
func near(got, want string) bool {
	g, err1 := strconv.Atoi(strings.TrimSuffix(got, "m"))
	w, err2 := strconv.Atoi(strings.TrimSuffix(want, "m"))
	if err1 != nil || err2 != nil || !strings.HasSuffix(got, "m") {
		return false
	}
	return g*10 >= w*8 && g*10 <= w*12
}

// TestPodMetricsPushMode: kubectl top pods where kcp runs the syncer
// itself (push mode): kcp asks the physical cluster over its own
// connection, with the SyncTarget's kubeconfig.
func TestPodMetricsPushMode(t *testing.T) {
	bins := binaries(t)
	// The physical cluster listens on loopback.
	s := framework.StartServer(t, "", "--push-mode", "--webhook-allowed-networks=127.0.0.0/8")
	const compute, team = "root:compute", "root:team-push"
	s.CreateWorkspaces(compute, team)
	pc1 := startMetricsClusters(t, bins, "pc1")["pc1"]
	registerPush(t, s, compute, "pc1", "eu", pc1, "")
	waitTargetsReady(t, s, compute, "pc1")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "`+compute+`", namespaceSelector: {}, locationSelector: {matchLabels: {region: eu}}}
`))
	framework.Eventually(t, 60*time.Second, "default placed on pc1", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == compute+"/pc1", a
	})
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "web.yaml", fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {%s: 300m, %s: 80Mi}
    spec: {containers: [{name: nginx, image: nginx}]}
`, physical.UsageCPUAnnotation, physical.UsageMemoryAnnotation)))
	framework.Eventually(t, 4*physical.MetricResolution+120*time.Second, "kubectl top pods in push mode", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "top", "pods")
		rows := topRows(out)
		if err != nil || len(rows) != 1 {
			time.Sleep(2 * time.Second)
			return false, fmt.Sprintf("%v %s", err, out)
		}
		for name, row := range rows {
			if !strings.HasPrefix(name, "web-") || !near(row[0], "300m") || row[1] != "80Mi" {
				time.Sleep(2 * time.Second)
				return false, out
			}
		}
		t.Logf("push mode: kubectl top pods:\n%s", out)
		return true, out
	})
}
