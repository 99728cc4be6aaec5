package multicluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestPlacelessWorkspace is issue 51, item 6 and the headless Services of
// item 2, with the real kubectl: a workspace that places nowhere behaves
// like a cluster without nodes. Its workload objects are stored, with a
// warning on create and a condition saying that no Placement selects the
// namespace, and they are assigned (and so run) once a Placement selects
// it. No physical cluster is needed: the test registers a SyncTarget and
// writes its heartbeat itself.
func TestPlacelessWorkspace(t *testing.T) {
	s := framework.StartServer(t, "", "--synctarget-heartbeat-timeout=1h")
	const compute, team = "root:compute", "root:team"
	s.CreateWorkspaces(compute, team)
	const warning = `no Placement of this workspace selects namespace "default"`

	// Deployments, Services (a headless one too) and Ingresses, by create,
	// client-side apply and server-side apply: accepted with a warning.
	for _, c := range []struct {
		what string
		args []string
		yaml string
	}{
		{what: "kubectl create deployment", args: []string{"create", "deployment", "web", "--image=nginx", "--replicas=2"}},
		{what: "kubectl create service", args: []string{"create", "service", "clusterip", "web", "--tcp=80:80"}},
		{what: "kubectl apply of a headless Service", args: []string{"apply", "-f", "-"}, yaml: `apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 5432}]
`},
		{what: "kubectl apply --server-side of a Deployment", args: []string{"apply", "--server-side", "-f", "-"}, yaml: `apiVersion: apps/v1
kind: Deployment
metadata: {name: ssa}
spec:
  selector: {matchLabels: {app: ssa}}
  template:
    metadata: {labels: {app: ssa}}
    spec: {containers: [{name: c, image: nginx}]}
`},
		{what: "kubectl create ingress", args: []string{"create", "ingress", "web", "--rule=web.example.com/=web:80"}},
	} {
		out, err := s.KubectlErr(team, c.yaml, c.args...)
		if err != nil {
			t.Fatalf("%s in a workspace without Placement: %v\n%s", c.what, err, out)
		}
		if !strings.Contains(out, "Warning: "+warning) {
			t.Errorf("%s: want the warning %q, got:\n%s", c.what, warning, out)
		}
	}
	for _, obj := range []string{"deployment/web", "deployment/ssa", "service/web", "service/db"} {
		out := s.Kubectl(team, "get", obj, "-o", `jsonpath={.status.conditions[?(@.type=="Placed")].status}/{.status.conditions[?(@.type=="Placed")].reason}: {.status.conditions[?(@.type=="Placed")].message}`)
		if !strings.HasPrefix(out, "False/NoPlacement: "+warning) {
			t.Errorf("%s: want condition Placed=False (NoPlacement), got %q", obj, out)
		}
	}
	// The headless Service is what was asked, as on a cluster.
	if out := s.Kubectl(team, "get", "service", "db", "-o", "jsonpath={.spec.clusterIP} {.spec.clusterIPs}"); out != `None ["None"]` {
		t.Errorf("headless Service: clusterIP/clusterIPs %q", out)
	}
	// An update keeps it headless (kubectl apply again, with a change).
	if out, err := s.KubectlErr(team, `apiVersion: v1
kind: Service
metadata: {name: db, labels: {tier: data}}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 5432}]
`, "apply", "-f", "-"); err != nil {
		t.Errorf("re-applying the headless Service: %v\n%s", err, out)
	}

	// A Placement that selects default: what waited gets assigned, and so
	// runs (the syncer of pc1 would now see it).
	admin := adminIn(t, s, compute)
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "sync", "pc1", "--kcp-kubeconfig-out", t.TempDir()+"/pc1.kubeconfig", "--labels", "region=eu"); err != nil {
		t.Fatalf("kubectl kcp workload sync pc1: %v\n%s", err, out)
	}
	fakeHeartbeat(t, s, compute, "pc1")
	waitTargetsReady(t, s, compute, "pc1")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec:
  locationWorkspace: `+compute+`
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}
`))
	label, fin := workload.StateLabel(compute, "pc1"), workload.Finalizer(compute, "pc1")
	for _, obj := range []string{"deployment/web", "deployment/ssa", "service/web", "service/db", "ingress/web"} {
		kind, name, _ := strings.Cut(obj, "/")
		framework.Eventually(t, 30*time.Second, obj+" assigned to pc1 once a Placement selects default", func() (bool, string) {
			m, _ := kcpMeta(t, s, team, kind, name)
			return m.Labels[label] == workload.StateSync && slices.Contains(m.Finalizers, fin), fmt.Sprint(m.Labels, m.Finalizers)
		})
	}
	// Now placed: no warning, no condition.
	out, err := s.KubectlErr(team, "", "create", "deployment", "placed", "--image=nginx")
	if err != nil || strings.Contains(out, "Warning") {
		t.Errorf("create in a placed namespace: %v\n%s", err, out)
	}
	if out := s.Kubectl(team, "get", "deployment", "placed", "-o", `jsonpath={.status.conditions[?(@.type=="Placed")]}`); out != "" {
		t.Errorf("a Deployment in a placed namespace has a Placed condition: %s", out)
	}
	// A namespace the Placement does not select still waits, with the
	// warning naming it.
	s.Kubectl(team, "create", "namespace", "elsewhere")
	out, err = s.KubectlErr(team, "", "-n", "elsewhere", "create", "deployment", "web", "--image=nginx")
	if err != nil || !strings.Contains(out, `Warning: no Placement of this workspace selects namespace "elsewhere"`) {
		t.Errorf("create in a namespace no Placement selects, beside a Placement: %v\n%s", err, out)
	}
}

// TestRefusedKindsExplainThemselves is issue 51, item 5 (with kinds still
// refused: ReplicaSets, ControllerRevisions, Endpoints and EndpointSlices
// are projections now, TestProjection): a built-in kind
// that a workspace does not serve answers kubectl with what kcp runs and
// how to get more, instead of "no matches for kind ... ensure CRDs are
// installed first"; a workspace still reads like a cluster that has none
// of them, and namespaces still delete.
func TestRefusedKindsExplainThemselves(t *testing.T) {
	s := framework.StartServer(t, "")
	const ws = "root:apps"
	s.CreateWorkspaces(ws)
	const says = "kcp does not serve"
	for _, c := range []struct {
		what string
		args []string
		yaml string
	}{
		{what: "kubectl apply of a ReplicationController", args: []string{"apply", "-f", "-"}, yaml: `apiVersion: v1
kind: ReplicationController
metadata: {name: db}
spec:
  selector: {app: db}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c, image: postgres}]}
`},
		{what: "kubectl create of a LimitRange", args: []string{"create", "-f", "-"}, yaml: `apiVersion: v1
kind: LimitRange
metadata: {name: small}
spec: {limits: [{type: Container, max: {cpu: "1"}}]}
`},
		{what: "kubectl apply --server-side of a PodTemplate", args: []string{"apply", "--server-side", "-f", "-"}, yaml: `apiVersion: v1
kind: PodTemplate
metadata: {name: web-1}
template:
  spec: {containers: [{name: c, image: nginx}]}
`},
		{what: "kubectl get of a ReplicationController by name", args: []string{"get", "replicationcontroller", "db"}},
	} {
		out, err := s.KubectlErr(ws, c.yaml, c.args...)
		t.Logf("%s:\n%s", c.what, out)
		if err == nil || !strings.Contains(out, says) || strings.Contains(out, "ensure CRDs are installed") {
			t.Errorf("%s: want an error saying %q, got %v:\n%s", c.what, says, err, out)
		}
	}
	// Lists read like a cluster with none of them.
	for _, r := range []string{"podtemplates", "limitranges", "replicationcontrollers"} {
		if out, err := s.KubectlErr(ws, "", "get", r); err != nil || !strings.Contains(out, "No resources found") {
			t.Errorf("kubectl get %s: %v\n%s", r, err, out)
		}
	}
	// Served kinds are untouched, and namespaces with content delete.
	s.Kubectl(ws, "create", "namespace", "gone")
	s.Kubectl(ws, "-n", "gone", "create", "configmap", "c")
	if out, err := s.KubectlErr(ws, "", "-n", "gone", "create", "deployment", "web", "--image=nginx"); err != nil {
		t.Errorf("a Deployment: %v\n%s", err, out)
	}
	if out, err := s.KubectlErr(ws, "", "delete", "namespace", "gone", "--timeout=60s"); err != nil {
		t.Errorf("deleting a namespace: %v\n%s", err, out)
	}
}
