package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// servicesApp is what an application's manifests hold: a ClusterIP
// Service, a NodePort one with two ports, a LoadBalancer one that keeps
// traffic local (a health check node port), a headless one and an
// ExternalName one.
const servicesApp = `apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: np}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}, {name: metrics, port: 9090}]
---
apiVersion: v1
kind: Service
metadata: {name: lb}
spec: {type: LoadBalancer, externalTrafficPolicy: Local, selector: {app: web}, ports: [{name: https, port: 443}]}
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec: {clusterIP: None, selector: {app: db}, ports: [{port: 5432}]}
---
apiVersion: v1
kind: Service
metadata: {name: ext}
spec: {type: ExternalName, externalName: db.example.com}
`

// svcState is what a Service shows of its allocation: cluster IPs, node
// ports in port order, the health check node port and the load-balancer
// ingress IPs.
func svcState(svc *corev1.Service) string {
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.NodePort))
	}
	var lb []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		lb = append(lb, in.IP)
	}
	return fmt.Sprintf("ips=%v ports=%v hc=%d lb=%v", svc.Spec.ClusterIPs, ports, svc.Spec.HealthCheckNodePort, lb)
}

// allocationsOf lists the targets and cluster IPs of a Service's
// allocations annotation, in its order.
func allocationsOf(svc *corev1.Service) []string {
	var list []workload.ServiceAllocation
	_ = json.Unmarshal([]byte(svc.Annotations[workload.AllocationsAnnotation]), &list)
	var out []string
	for _, a := range list {
		out = append(out, a.Target+"="+strings.Join(a.ClusterIPs, ","))
	}
	return out
}

// sameAsDownstream waits until each named Service in kcp shows what the
// physical cluster allocated for its copy, and returns the copies.
func sameAsDownstream(t *testing.T, up, down kubernetes.Interface, ns string, names ...string) map[string]*corev1.Service {
	t.Helper()
	ctx := context.Background()
	out := map[string]*corev1.Service{}
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("Services %v to show the physical cluster's allocation", names), func() (bool, string) {
		for _, name := range names {
			d, err := down.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, name + ": " + err.Error()
			}
			u, err := up.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, name + ": " + err.Error()
			}
			if svcState(u) != svcState(d) {
				return false, fmt.Sprintf("%s: kcp %s, downstream %s", name, svcState(u), svcState(d))
			}
			out[name] = d
		}
		return true, ""
	})
	return out
}

// tenantKubectl runs kubectl in a workspace as a member who is admin there
// (a service account bound to cluster-admin), not system:masters.
func tenantKubectl(t *testing.T, s *framework.Server, workspace string) func(args ...string) (string, error) {
	t.Helper()
	s.Kubectl(workspace, "create", "serviceaccount", "dev")
	s.Kubectl(workspace, "create", "clusterrolebinding", "dev-admin", "--clusterrole=cluster-admin", "--serviceaccount=default:dev")
	token := strings.TrimSpace(s.Kubectl(workspace, "create", "token", "dev"))
	return func(args ...string) (string, error) {
		full := append([]string{"--kubeconfig", os.DevNull, "--server", s.URL() + "/clusters/" + workspace, "--insecure-skip-tls-verify", "--token", token}, args...)
		out, err := exec.Command(filepath.Join(framework.RepoRoot(), "bin", "kubectl"), full...).CombinedOutput()
		return string(out), err
	}
}

// TestServicesShowTheirClusterAllocation places a namespace on one of two
// physical clusters: its Services show the cluster IPs, node ports, health
// check node port and load-balancer status that cluster allocated, in
// kubectl get; a headless Service is headless there too; a tenant's updates
// that omit them keep them; a tenant cannot make kcp show other values (by
// the fields or by kcp's annotations); and when the namespace moves to the
// other cluster, the values follow.
func TestServicesShowTheirClusterAllocation(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:services"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	for _, name := range []string{"pc1", "pc2"} {
		register(t, s, admin, name, "region=eu", pcs[name])
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", locationSelector: {matchLabels: {region: eu}}, namespaceSelector: {}}
`))
	assigned := func() string {
		return s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 30*time.Second, "the namespace to be assigned", func() (bool, string) {
		a := assigned()
		return a == compute+"/pc1" || a == compute+"/pc2", a
	})
	on := strings.TrimPrefix(assigned(), compute+"/")
	other := map[string]string{"pc1": "pc2", "pc2": "pc1"}[on]
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()
	up := s.Client(team)
	down := downClient(t, pcs[on])

	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "services.yaml", servicesApp))
	// A client's own cluster IP is not used (each physical cluster
	// allocates its own): said on create.
	out, err := s.KubectlErr(team, `apiVersion: v1
kind: Service
metadata: {name: fixed}
spec: {clusterIP: 10.96.200.200, selector: {app: web}, ports: [{port: 80}]}
`, "create", "-f", "-")
	if err != nil {
		t.Fatalf("a Service asking for its cluster IP: %v\n%s", err, out)
	}
	framework.MustContain(t, "creating a Service with a cluster IP", out, "service/fixed created", "spec.clusterIPs [10.96.200.200] is not used")

	// A load balancer on the physical cluster gives lb an address (the
	// test clusters have none: written as one would).
	framework.Eventually(t, 60*time.Second, "lb downstream", func() (bool, string) {
		lb, err := down.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		_, err = down.CoreV1().Services(ns).UpdateStatus(ctx, lb, metav1.UpdateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	copies := sameAsDownstream(t, up, down, ns, "web", "np", "lb", "fixed")
	for name, c := range copies {
		if len(c.Spec.ClusterIPs) != 1 || c.Spec.ClusterIPs[0] == "" || c.Spec.ClusterIPs[0] == "10.96.200.200" {
			t.Errorf("%s downstream: cluster IPs %v", name, c.Spec.ClusterIPs)
		}
	}
	if copies["np"].Spec.Ports[0].NodePort == 0 || copies["np"].Spec.Ports[1].NodePort == 0 || copies["lb"].Spec.HealthCheckNodePort == 0 {
		t.Errorf("node ports downstream: np %s, lb %s", svcState(copies["np"]), svcState(copies["lb"]))
	}
	webIP := copies["web"].Spec.ClusterIP
	// kubectl get shows them as on a cluster.
	rows := map[string]string{}
	for _, line := range strings.Split(s.Kubectl(team, "get", "services", "--no-headers"), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			rows[f[0]] = strings.Join(f[1:5], " ")
		}
	}
	np := copies["np"].Spec.Ports
	for name, want := range map[string]string{
		"web": "ClusterIP " + webIP + " <none> 80/TCP",
		"np":  fmt.Sprintf("NodePort %s <none> 80:%d/TCP,9090:%d/TCP", copies["np"].Spec.ClusterIP, np[0].NodePort, np[1].NodePort),
		"lb":  fmt.Sprintf("LoadBalancer %s 192.0.2.10 443:%d/TCP", copies["lb"].Spec.ClusterIP, copies["lb"].Spec.Ports[0].NodePort),
		"db":  "ClusterIP None <none> 5432/TCP",
		"ext": "ExternalName <none> db.example.com <none>",
	} {
		if rows[name] != want {
			t.Errorf("kubectl get services, %s: %q, want %q", name, rows[name], want)
		}
	}
	// The allocations annotation names the cluster.
	web, err := up.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := allocationsOf(web); len(got) != 1 || got[0] != compute+"/"+on+"="+webIP {
		t.Errorf("allocations of web: %v", got)
	}
	// A headless Service is headless on the physical cluster too.
	if db, err := down.CoreV1().Services(ns).Get(ctx, "db", metav1.GetOptions{}); err != nil || db.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("headless Service downstream: %v %v", err, db)
	}
	if ext, err := down.CoreV1().Services(ns).Get(ctx, "ext", metav1.GetOptions{}); err != nil || ext.Spec.Type != corev1.ServiceTypeExternalName || ext.Spec.ClusterIP != "" {
		t.Errorf("ExternalName Service downstream: %v %v", err, ext)
	}

	// A tenant's updates that omit them keep them: kubectl replace (a PUT
	// of the manifest), kubectl apply, server-side apply, a merge patch.
	asDev := tenantKubectl(t, s, team)
	before := map[string]string{}
	for _, name := range []string{"web", "np", "lb"} {
		u, err := up.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[name] = svcState(u)
	}
	manifest := strings.ReplaceAll(servicesApp, "metadata: {name: web}", "metadata: {name: web, labels: {tier: front}}")
	// (kubectl apply --server-side takes over what kubectl apply set: the
	// note stays in the manifest.)
	manifest2 := strings.ReplaceAll(manifest, "{name: np}", "{name: np, annotations: {note: applied}}")
	for _, args := range [][]string{
		{"replace", "-f", framework.WriteFile(t, "replace.yaml", manifest)},
		{"apply", "-f", framework.WriteFile(t, "apply.yaml", manifest2)},
		{"apply", "--server-side", "--force-conflicts", "-f", framework.WriteFile(t, "ssa.yaml", strings.ReplaceAll(manifest2, "{name: lb}", "{name: lb, labels: {via: ssa}}"))},
		{"patch", "service", "np", "--type=merge", "-p", `{"spec":{"ports":[{"name":"http","port":80,"targetPort":8081},{"name":"metrics","port":9090}]}}`},
	} {
		if out, err := asDev(args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		} else if strings.Contains(out, "is not used") {
			t.Errorf("kubectl %s: a warning for values it did not set:\n%s", args[0], out)
		}
	}
	for name, want := range before {
		u, err := up.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := svcState(u); got != want {
			t.Errorf("%s after a tenant's updates that omit them: %s, want %s", name, got, want)
		}
	}
	framework.Eventually(t, 30*time.Second, "the tenant's changes downstream", func() (bool, string) {
		n, err := down.CoreV1().Services(ns).Get(ctx, "np", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		u, _ := up.CoreV1().Services("default").Get(ctx, "np", metav1.GetOptions{})
		return n.Spec.Ports[0].TargetPort.IntValue() == 8081 && n.Annotations["note"] == "applied", fmt.Sprintf("downstream %+v %v\nupstream %+v %v", n.Spec.Ports, n.Annotations, u.Spec.Ports, u.Annotations)
	})

	// A tenant cannot make kcp show other values: not by the fields (not
	// used, with a warning), nor by kcp's annotations (dropped).
	out, err = asDev("patch", "service", "web", "--type=merge", "-p", `{"spec":{"clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"]}}`)
	if err != nil {
		t.Fatalf("patching web's cluster IP: %v\n%s", err, out)
	}
	framework.MustContain(t, "a tenant setting web's cluster IP", out, "is not used")
	key := workload.TargetKey(compute, on)
	forged := fmt.Sprintf(`{"target":"%s/%s","clusterIPs":["10.96.0.1"],"nodePorts":{"http":30000}}`, compute, on)
	for _, args := range [][]string{
		{"annotate", "--overwrite", "service", "np", workload.StatusAnnotationPrefix + key + "=" + forged},
		{"annotate", "--overwrite", "service", "web", workload.AllocationsAnnotation + "=[" + forged + "]"},
		{"patch", "service", "web", "--subresource=status", "--type=merge", "-p", `{"metadata":{"annotations":{"` + workload.StatusAnnotationPrefix + key + `":` + fmt.Sprintf("%q", forged) + `}}}`},
	} {
		out, err := asDev(args...)
		t.Logf("a tenant's kubectl %s: %v %s", args[0], err, out)
	}
	for name, want := range before {
		u, err := up.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := svcState(u); got != want {
			t.Errorf("%s after a tenant's forgeries: %s, want %s", name, got, want)
		}
		if strings.Contains(u.Annotations[workload.AllocationsAnnotation]+u.Annotations[workload.StatusAnnotationPrefix+key], "10.96.0.1") {
			t.Errorf("%s: a tenant's forged allocation was kept: %v", name, u.Annotations)
		}
	}
	// Nothing of it reached the physical cluster: the copy's address is its
	// own, and kcp's annotations stay in kcp.
	if d, err := down.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil || d.Spec.ClusterIP != webIP {
		t.Errorf("web downstream after the forgeries: %v %v", err, d)
	} else {
		for k := range d.Annotations {
			if k == workload.AllocationsAnnotation || strings.HasPrefix(k, workload.StatusAnnotationPrefix) {
				t.Errorf("kcp's annotation %s went downstream", k)
			}
		}
	}

	// Settled, nothing writes the Services again and again (the syncer's
	// reports against kcp's and the placement controller's writes).
	versions := func() string {
		list, err := up.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, svc := range list.Items {
			out = append(out, svc.Name+"@"+svc.ResourceVersion)
		}
		return strings.Join(out, " ")
	}
	settled := versions()
	time.Sleep(5 * time.Second)
	if now := versions(); now != settled {
		t.Errorf("the Services keep being written: %s, 5s later %s", settled, now)
	}

	// The namespace moves (a drain of its cluster): the values follow.
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "drain", on); err != nil {
		t.Fatalf("kubectl kcp workload drain %s: %v\n%s", on, err, out)
	}
	framework.Eventually(t, 90*time.Second, "the namespace to move to "+other, func() (bool, string) {
		a := assigned()
		return a == compute+"/"+other, a
	})
	moved := sameAsDownstream(t, up, downClient(t, pcs[other]), ns, "web", "np", "lb", "fixed")
	framework.Eventually(t, 30*time.Second, "the allocations to list "+other+" only", func() (bool, string) {
		u, err := up.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := allocationsOf(u)
		return len(got) == 1 && got[0] == compute+"/"+other+"="+moved["web"].Spec.ClusterIP, fmt.Sprint(got)
	})
}

// TestServicesOnTwoClusters duplicates a namespace on two physical
// clusters: each allocates its own cluster IP and node ports; kcp shows
// those of the first target in key order (the one that reports status) and
// lists both in the allocations annotation; a tenant's update that omits
// them keeps them, and its forged report is dropped.
func TestServicesOnTwoClusters(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:services2"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	for _, name := range []string{"pc1", "pc2"} {
		register(t, s, admin, name, "region=eu", pcs[name])
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: both}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true}
`))
	framework.Eventually(t, 60*time.Second, "default on both clusters", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == compute+"/pc1,"+compute+"/pc2", a
	})
	first, second := "pc1", "pc2"
	if workload.TargetKey(compute, "pc2") < workload.TargetKey(compute, "pc1") {
		first, second = "pc2", "pc1"
	}
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()
	up := s.Client(team)
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "services.yaml", servicesApp))

	shown := sameAsDownstream(t, up, downClient(t, pcs[first]), ns, "web", "np")
	var copies []*corev1.Service
	for _, pc := range []string{first, second} {
		framework.Eventually(t, 60*time.Second, "np on "+pc, func() (bool, string) {
			c, err := downClient(t, pcs[pc]).CoreV1().Services(ns).Get(ctx, "np", metav1.GetOptions{})
			if err == nil {
				copies = append(copies, c)
			}
			return err == nil, fmt.Sprint(err)
		})
	}
	t.Logf("np: %s on %s, %s on %s", svcState(copies[0]), first, svcState(copies[1]), second)
	framework.Eventually(t, 30*time.Second, "np's allocations to list both clusters, the first first", func() (bool, string) {
		u, err := up.CoreV1().Services("default").Get(ctx, "np", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := allocationsOf(u)
		want := []string{compute + "/" + first + "=" + copies[0].Spec.ClusterIP, compute + "/" + second + "=" + copies[1].Spec.ClusterIP}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})
	// Each cluster's node ports are listed with its cluster IP.
	u, err := up.CoreV1().Services("default").Get(ctx, "np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var list []workload.ServiceAllocation
	if err := json.Unmarshal([]byte(u.Annotations[workload.AllocationsAnnotation]), &list); err != nil || len(list) != 2 {
		t.Fatalf("allocations of np: %v %s", err, u.Annotations[workload.AllocationsAnnotation])
	}
	for i, c := range copies {
		if list[i].NodePorts["http"] != c.Spec.Ports[0].NodePort || list[i].NodePorts["metrics"] != c.Spec.Ports[1].NodePort {
			t.Errorf("node ports listed for %s: %v, downstream %s", list[i].Target, list[i].NodePorts, svcState(c))
		}
	}

	// A tenant's update that omits them keeps the first's; its forged
	// report for the first target is dropped.
	asDev := tenantKubectl(t, s, team)
	if out, err := asDev("replace", "-f", framework.WriteFile(t, "replace.yaml", strings.ReplaceAll(servicesApp, "{name: np}", "{name: np, labels: {tier: back}}"))); err != nil {
		t.Fatalf("kubectl replace: %v\n%s", err, out)
	}
	forged := fmt.Sprintf(`{"target":"%s/%s","clusterIPs":[%q]}`, compute, first, copies[1].Spec.ClusterIP)
	asDev("patch", "service", "web", "--subresource=status", "--type=merge", "-p",
		`{"metadata":{"annotations":{"`+workload.StatusAnnotationPrefix+workload.TargetKey(compute, first)+`":`+fmt.Sprintf("%q", forged)+`}}}`)
	for _, name := range []string{"web", "np"} {
		u, err := up.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := svcState(u), svcState(shown[name]); got != want {
			t.Errorf("%s after the tenant's update and forgery: %s, want the first cluster's %s", name, got, want)
		}
	}
}

// TestHelmInstallWaits runs helm as a user would against a placed
// workspace's kubeconfig: `helm create demo` and `helm install demo ./demo
// --wait` complete (the Deployment becomes ready on the physical cluster,
// the Service shows its cluster IP).
func TestHelmInstallWaits(t *testing.T) {
	helm, err := physical.EnsureHelm(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:charts"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	placeAll(t, s, team, compute, "pc1")
	kubeconfig := adminIn(t, s, team)
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(helm, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("create", "demo"); err != nil {
		t.Fatalf("helm create demo: %v\n%s", err, out)
	}
	start := time.Now()
	out, err := run("install", "demo", "./demo", "--wait", "--timeout", "3m")
	if err != nil {
		t.Fatalf("helm install demo ./demo --wait: %v\n%s\n%s", err, out, s.Kubectl(team, "get", "all", "-o", "wide"))
	}
	t.Logf("helm install --wait completed in %s", time.Since(start).Round(100*time.Millisecond))
	framework.MustContain(t, "helm install", out, "STATUS: deployed")
	ip := s.Kubectl(team, "get", "service", "demo", "-o", "jsonpath={.spec.clusterIP}")
	if ip == "" || ip == "None" {
		t.Errorf("the chart's Service shows cluster IP %q", ip)
	}
	if out, err := run("list"); err != nil || !strings.Contains(out, "deployed") {
		t.Errorf("helm list: %v\n%s", err, out)
	}
	names := strings.Fields(s.Kubectl(team, "get", "deployments,services,serviceaccounts", "-l", "app.kubernetes.io/instance=demo", "-o", "name"))
	sort.Strings(names)
	if fmt.Sprint(names) != "[deployment.apps/demo service/demo serviceaccount/demo]" {
		t.Errorf("the chart's objects: %v", names)
	}
}
