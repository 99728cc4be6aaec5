package multicluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestTransparentMultiCluster is the user story of issue 14 on two real
// physical clusters, on both datastores: an infrastructure workspace
// registers pc1 (region eu) and pc2 (region us) and runs their syncers; an
// application team places its workspace on eu and runs unmodified kubectl
// create deployment / expose / rollout status; the objects run on pc1 only,
// status comes back, drift is reverted, a second team with the same names
// does not collide, deletion goes downstream first, and a syncer restart
// catches up with what happened while it was down.
func TestTransparentMultiCluster(t *testing.T) {
	bins := binaries(t)
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) { testTransparentMultiCluster(t, bins, framework.DatastoreFor(t, d), false) })
	}
	// Push mode: kcp runs the same syncer library itself. The same story,
	// on SQLite (the syncer is the same code on either datastore).
	t.Run("push", func(t *testing.T) { testTransparentMultiCluster(t, bins, "", true) })
}

func testTransparentMultiCluster(t *testing.T, bins physical.Binaries, datastore string, push bool) {
	args := []string{"--synctarget-heartbeat-timeout=10s"}
	if push {
		// The physical clusters listen on loopback, which tenants'
		// addresses may not reach unless the operator allows it.
		args = append(args, "--push-mode", "--webhook-allowed-networks=127.0.0.0/8")
	}
	s := framework.StartServer(t, datastore, args...)
	const compute, teamA, teamB = "root:compute", "root:team-a", "root:team-b"
	s.CreateWorkspaces(compute, teamA, teamB)

	pcs := startPhysical(t, bins, "pc1", "pc2")

	// The infrastructure team registers both and runs their syncers.
	admin := adminIn(t, s, compute)
	syncers := map[string]*syncerProc{}
	for name, region := range map[string]string{"pc1": "eu", "pc2": "us"} {
		if push {
			// Push mode: the SyncTarget names a Secret of the workspace
			// with the physical cluster's kubeconfig; kcp runs the syncer.
			// And a CRD of the physical clusters, imported through spec.resources.
			if out, err := exec.Command(filepath.Join(framework.RepoRoot(), "bin", "kubectl"), "--kubeconfig", pcs[name].Kubeconfig, "apply", "-f",
				framework.WriteFile(t, "widgets.yaml", framework.NamespacedCRDWithStatus("widgets", "Widget", "size: {type: integer}"))).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			exec.Command(filepath.Join(framework.RepoRoot(), "bin", "kubectl"), "--kubeconfig", pcs[name].Kubeconfig, "wait", "--for=condition=Established", "crd/widgets.example.com").Run()
			registerPush(t, s, compute, name, region, pcs[name], ", resources: [widgets.example.com]")
			continue
		}
		syncers[name] = register(t, s, admin, name, "region="+region, pcs[name])
	}
	testPushModeRules(t, s, compute, push)
	waitTargetsReady(t, s, compute, "pc1", "pc2")

	if out := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", "jsonpath={.status.syncedResources}"); !strings.Contains(out, `{"resource":"deployments.apps/v1","state":"Accepted"}`) {
		t.Errorf("the SyncTarget does not report its synced resources: %s", out)
	}

	// A Deployment in a namespace that no Placement selects is stored,
	// as on a cluster without nodes, with a warning that says what to do
	// (placeless_test.go has the rest).
	if out, err := s.KubectlErr(teamA, "", "create", "deployment", "early", "--image=nginx"); err != nil || !strings.Contains(out, "Placement") {
		t.Errorf("a Deployment without a Placement: want it stored with a warning naming Placement, got %v\n%s", err, out)
	}
	s.Kubectl(teamA, "delete", "deployment", "early")
	// A Placement needs "use" on the location's SyncTargets: a team member
	// (a service account that is admin of team-a only) is refused.
	s.Kubectl(teamA, "create", "serviceaccount", "dev")
	s.Kubectl(teamA, "create", "clusterrolebinding", "dev-admin", "--clusterrole=cluster-admin", "--serviceaccount=default:dev")
	token := strings.TrimSpace(s.Kubectl(teamA, "create", "token", "dev"))
	placementYAML := func(region string) string {
		return framework.WriteFile(t, "placement.yaml", fmt.Sprintf(`apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec:
  locationWorkspace: %s
  locationSelector: {matchLabels: {region: %s}}
  namespaceSelector: {}
`, compute, region))
	}
	asDev := func(args ...string) (string, error) {
		full := append([]string{"--kubeconfig", os.DevNull, "--server", s.URL() + "/clusters/" + teamA, "--insecure-skip-tls-verify", "--token", token}, args...)
		out, err := exec.Command(filepath.Join(framework.RepoRoot(), "bin", "kubectl"), full...).CombinedOutput()
		return string(out), err
	}
	if out, err := asDev("apply", "-f", placementYAML("eu")); err == nil || !strings.Contains(out, `may not use the SyncTargets of workspace root:compute`) {
		t.Errorf("a Placement without use permission: want a refusal, got %v\n%s", err, out)
	}
	// Nor can the team member reach the location's negotiated APIs by
	// binding its export directly (kcp binds it for a Placement only),
	// and the refused Placement left no binding behind.
	if out, err := asDev("apply", "-f", framework.WriteFile(t, "location-binding.yaml", `apiVersion: apis.kcp.io/v1alpha1
kind: APIBinding
metadata: {name: mine}
spec: {reference: {export: {path: "`+compute+`", name: kubernetes}}}
`)); err == nil || !strings.Contains(out, `may not bind APIExport kubernetes of workspace `+compute) {
		t.Errorf("binding the location's export without bind: want a refusal, got %v\n%s", err, out)
	}
	if out := s.Kubectl(teamA, "get", "apibindings", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("bindings after refused attempts: %s", out)
	}
	if out, err := asDev("auth", "can-i", "create", "configmaps"); err != nil || !strings.Contains(out, "yes") {
		t.Errorf("the team member is admin of team-a: %v %s", err, out)
	}
	// A user with "use" on the SyncTargets may. alice may enter team-a and
	// compute (granted in root), is admin of team-a, and gets "use" on
	// synctargets in compute, by ordinary RBAC there.
	s.GrantAccess("root", "alice", "team-a", "compute")
	s.Kubectl(teamA, "create", "clusterrolebinding", "alice-admin", "--clusterrole=cluster-admin", "--user=alice")
	if out, err := s.KubectlErr(teamA, "", "--as=alice", "apply", "-f", placementYAML("eu")); err == nil || !strings.Contains(out, `"alice" may not use the SyncTargets`) {
		t.Errorf("alice without use permission: want a refusal, got %v\n%s", err, out)
	}
	// (kubectl create clusterrole refuses the verb "use" outside pod
	// security policies: the role is applied as YAML.)
	s.Kubectl(compute, "apply", "-f", framework.WriteFile(t, "use.yaml", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: synctarget-user}
rules: [{apiGroups: [workload.kcp.io], resources: [synctargets], verbs: [use]}]
`))
	s.Kubectl(compute, "create", "clusterrolebinding", "alice-uses-synctargets", "--clusterrole=synctarget-user", "--user=alice")
	if out, err := s.KubectlErr(teamA, "", "--as=alice", "apply", "-f", placementYAML("eu")); err != nil {
		t.Fatalf("alice with use permission: %v\n%s", err, out)
	}
	s.Kubectl(teamB, "apply", "-f", placementYAML("eu"))
	framework.Eventually(t, 30*time.Second, "the Placement to select pc1 and assign default", func() (bool, string) {
		out := s.Kubectl(teamA, "get", "placement", "eu", "-o", `jsonpath={.status.selectedTargets} {.status.namespaces} {.status.conditions[?(@.type=="Ready")].status}`)
		return out == `["root:compute/pc1"] 1 True`, out
	})
	if ann := s.Kubectl(teamA, "get", "namespace", "default", "-o", "jsonpath={.metadata.annotations}"); !strings.Contains(ann, `"workload.kcp.io/sync-target":"root:compute/pc1"`) {
		t.Errorf("the namespace does not show its SyncTarget: %s", ann)
	}

	// The application team's commands, unmodified.
	s.Kubectl(teamA, "create", "deployment", "web", "--image=nginx", "--replicas=3")
	s.Kubectl(teamA, "expose", "deployment", "web", "--port=80")
	s.Kubectl(teamA, "create", "configmap", "web-config", "--from-literal=color=blue")
	if out, err := s.KubectlErr(teamA, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil || !strings.Contains(out, "successfully rolled out") {
		t.Fatalf("kubectl rollout status: %v\n%s", err, out)
	}
	if out := s.Kubectl(teamA, "get", "deployment", "web"); !strings.Contains(out, "3/3") {
		t.Errorf("kubectl get deployment web: want READY 3/3\n%s", out)
	}

	// Debugging through kcp, in pull mode (the syncer's tunnel) and push
	// mode (kcp's own connection to the cluster): logs and exec of the
	// Deployment's pods (streams_test.go has the rest).
	if out, err := s.KubectlErr(teamA, "", "logs", "deployment/web"); err != nil || !strings.Contains(out, "kwok container log of cluster pc1") {
		t.Errorf("kubectl logs deployment/web: %v\n%s", err, out)
	}
	if out, err := s.KubectlErr(teamA, "", "exec", "deployment/web", "--", "sh", "-c", "echo on $PHYSICAL_CLUSTER"); err != nil || strings.TrimSpace(out) != "on pc1" {
		t.Errorf("kubectl exec deployment/web: %v\n%s", err, out)
	}

	// Downstream: on pc1, in the namespace of (team-a, default); not on pc2.
	pc1, pc2 := downClient(t, pcs["pc1"]), downClient(t, pcs["pc2"])
	nsA := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default")
	ctx := context.Background()
	dep, err := pc1.AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || *dep.Spec.Replicas != 3 || dep.Status.AvailableReplicas != 3 {
		t.Fatalf("the Deployment on pc1: %v %+v", err, dep)
	}
	webUID := dep.UID
	// Its pods talk to team-a's workspace (inclusterconfig_test.go has the
	// operator): kcp's address, and a workspace token in the Secret
	// mounted at the in-cluster path, in pull and push mode alike.
	if pods, err := pc1.CoreV1().Pods(nsA).List(ctx, metav1.ListOptions{LabelSelector: "app=web"}); err != nil || len(pods.Items) == 0 {
		t.Errorf("web's pods on pc1: %v", err)
	} else {
		env := map[string]string{}
		for _, e := range pods.Items[0].Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["KUBERNETES_SERVICE_PORT"] != fmt.Sprint(s.Port) {
			t.Errorf("web's pod does not name kcp as its API (port %d): %v", s.Port, env)
		}
		sec, err := pc1.CoreV1().Secrets(nsA).Get(ctx, syncer.APIAccessSecretName("default"), metav1.GetOptions{})
		if err != nil || len(sec.Data["token"]) == 0 || len(sec.Data["ca.crt"]) == 0 || string(sec.Data["namespace"]) != "default" {
			t.Errorf("the workspace token of web's pods: %v %v", err, sec)
		}
	}
	if _, err := pc1.CoreV1().Services(nsA).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the Service on pc1: %v", err)
	}
	if cm, err := pc1.CoreV1().ConfigMaps(nsA).Get(ctx, "web-config", metav1.GetOptions{}); err != nil || cm.Data["color"] != "blue" {
		t.Errorf("the ConfigMap on pc1: %v %+v", err, cm)
	}
	if ns, err := pc1.CoreV1().Namespaces().Get(ctx, nsA, metav1.GetOptions{}); err != nil || ns.Annotations[syncer.UpstreamClusterAnnotation] != teamA {
		t.Errorf("the downstream namespace does not map back to %s: %v %+v", teamA, err, ns)
	}
	if _, err := pc2.AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Errorf("the Deployment also runs on pc2, which the Placement does not select")
	}

	// Drift made downstream by hand is reverted.
	scale, _ := pc1.AppsV1().Deployments(nsA).GetScale(ctx, "web", metav1.GetOptions{})
	scale.Spec.Replicas = 1
	if _, err := pc1.AppsV1().Deployments(nsA).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the syncer to revert replicas changed on pc1", func() (bool, string) {
		d, err := pc1.AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && *d.Spec.Replicas == 3, fmt.Sprint(err)
	})
	// kubectl scale goes down, and status comes back.
	s.Kubectl(teamA, "scale", "deployment", "web", "--replicas=5")
	if out, err := s.KubectlErr(teamA, "", "rollout", "status", "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("rollout status after scale: %v\n%s", err, out)
	}
	if out := s.Kubectl(teamA, "get", "deployment", "web"); !strings.Contains(out, "5/5") {
		t.Errorf("after kubectl scale: want 5/5\n%s", out)
	}
	// The downstream copy was updated in place all along, never deleted
	// and recreated (nor its namespace).
	if d, err := pc1.AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{}); err != nil || d.UID != webUID {
		t.Errorf("the Deployment on pc1 was recreated: %v", err)
	}

	// A second team, same namespace and names: its own downstream namespace.
	s.Kubectl(teamB, "create", "deployment", "web", "--image=nginx", "--replicas=1")
	nsB := syncer.DownstreamNamespace(logicalcluster.Name(teamB), "default")
	framework.Eventually(t, 60*time.Second, "team-b's Deployment on pc1, apart from team-a's", func() (bool, string) {
		b, err := pc1.AppsV1().Deployments(nsB).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		a, err := pc1.AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && *b.Spec.Replicas == 1 && *a.Spec.Replicas == 5, fmt.Sprint(err)
	})
	if out := s.Kubectl(teamB, "get", "configmaps"); strings.Contains(out, "web-config") {
		t.Errorf("team-b sees team-a's ConfigMap:\n%s", out)
	}

	// A tenant cannot place objects itself: assignment labels and syncer
	// finalizers it writes (here for pc2, which its Placement does not
	// select) are dropped, on objects and on its namespace.
	pc2Label, pc2Finalizer := workload.StateLabel(compute, "pc2"), workload.Finalizer(compute, "pc2")
	forged := framework.WriteFile(t, "forged.yaml", fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: forged, labels: {%q: Sync}, finalizers: [%q]}
`, pc2Label, pc2Finalizer))
	if out, err := asDev("apply", "-f", forged); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := asDev("label", "namespace", "default", pc2Label+"=Sync"); err != nil {
		t.Logf("labelling the namespace: %v %s", err, out)
	}
	meta := s.Kubectl(teamA, "get", "configmap", "forged", "-o", "jsonpath={.metadata.labels} {.metadata.finalizers}")
	if strings.Contains(meta, pc2Label) || strings.Contains(meta, pc2Finalizer) || !strings.Contains(meta, workload.StateLabel(compute, "pc1")) {
		t.Errorf("a tenant's forged assignment was kept: %s", meta)
	}
	if l := s.Kubectl(teamA, "get", "namespace", "default", "-o", "jsonpath={.metadata.labels}"); strings.Contains(l, pc2Label) {
		t.Errorf("a tenant assigned its namespace to pc2: %s", l)
	}
	// Nor write kcp's placement policy (shares, overrides) on its
	// namespace, or a per-target status on an object: dropped.
	forgedPolicy := `{"mode":"Divide","targets":{"x":{"name":"root:compute/pc2","weight":1}}}`
	asDev("annotate", "--overwrite", "namespace", "default", workload.NamespacePolicyAnnotation+"="+forgedPolicy)
	asDev("annotate", "--overwrite", "configmap", "forged", workload.StatusAnnotationPrefix+workload.TargetKey(compute, "pc1")+`={"share":99}`)
	if ann := s.Kubectl(teamA, "get", "namespace", "default", "-o", "jsonpath={.metadata.annotations}"); strings.Contains(ann, "root:compute/pc2") {
		t.Errorf("a tenant's forged placement policy was kept: %s", ann)
	}
	if ann := s.Kubectl(teamA, "get", "configmap", "forged", "-o", "jsonpath={.metadata.annotations}"); strings.Contains(ann, workload.StatusAnnotationPrefix) {
		t.Errorf("a tenant's forged per-target status was kept: %s", ann)
	}
	// An override that would take over what the syncer owns downstream
	// (its label, the object's namespace) is refused with the reason.
	for _, patch := range []string{`{metadata: {labels: {workload.kcp.io/sync-target: other}}}`, `{metadata: {namespace: kube-system}}`} {
		out, err := s.KubectlErr(teamA, "", "apply", "-f", framework.WriteFile(t, "override.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec:
  locationWorkspace: root:compute
  locationSelector: {matchLabels: {region: eu}}
  namespaceSelector: {}
  overrides: [{patch: `+patch+`}]
`))
		if err == nil || !strings.Contains(out, "spec.overrides[0].patch") {
			t.Errorf("an override of %s: want a refusal, got %v\n%s", patch, err, out)
		}
	}
	time.Sleep(2 * time.Second)
	if _, err := pc2.CoreV1().ConfigMaps(nsA).Get(ctx, "forged", metav1.GetOptions{}); err == nil {
		t.Errorf("a forged label put a ConfigMap on pc2")
	}

	if push {
		// Imported in push mode too: negotiated, served, synced.
		framework.Eventually(t, 60*time.Second, "widgets negotiated from both push-mode imports", func() (bool, string) {
			out := s.Kubectl(compute, "get", "negotiatedapiresource", "widgets.example.com", "-o", "jsonpath={.status.imports}", "--ignore-not-found")
			return strings.Contains(out, "pc1.widgets") && strings.Contains(out, "pc2.widgets"), out
		})
		framework.Eventually(t, 30*time.Second, "widgets served in team-a", func() (bool, string) {
			out, err := s.KubectlErr(teamA, "", "apply", "-f", framework.WriteFile(t, "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 2}\n"))
			return err == nil, out
		})
		pc1cfg, _ := pcs["pc1"].RESTConfig()
		widgets := dynamic.NewForConfigOrDie(pc1cfg).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace(nsA)
		framework.Eventually(t, 60*time.Second, "the widget on pc1", func() (bool, string) {
			_, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
	}
	if !push {
		testSyncerView(t, s, syncers["pc1"].kubeconfig, teamA, teamB)
		testSyncerRestart(t, s, syncers["pc1"], pc1, nsA, teamA)
	}

	// kcp restarts; syncing resumes.
	s.Stop()
	s.Start()
	s.Kubectl(teamA, "create", "configmap", "after-restart", "--from-literal=a=b")
	framework.Eventually(t, 60*time.Second, "a ConfigMap created after a kcp restart to reach pc1", func() (bool, string) {
		_, err := pc1.CoreV1().ConfigMaps(nsA).Get(ctx, "after-restart", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// Deletion goes downstream first: kubectl delete returns once the copy
	// on pc1 is gone.
	if out, err := s.KubectlErr(teamA, "", "delete", "deployment", "web", "--timeout=60s"); err != nil {
		t.Fatalf("kubectl delete deployment web: %v\n%s", err, out)
	}
	if _, err := pc1.AppsV1().Deployments(nsA).Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Errorf("the Deployment is gone in kcp but still on pc1")
	}
	if _, err := pc1.AppsV1().Deployments(nsB).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("deleting team-a's web deleted team-b's: %v", err)
	}
	testCordon(t, s, compute, placementYAML("eu"))

	// A namespace removed from placement is cleaned up downstream.
	s.Kubectl(teamB, "delete", "placement", "eu")
	framework.Eventually(t, 60*time.Second, "team-b's downstream namespace to go once its Placement is deleted", func() (bool, string) {
		ns, err := pc1.CoreV1().Namespaces().Get(ctx, nsB, metav1.GetOptions{})
		return err != nil || ns.DeletionTimestamp != nil, fmt.Sprint(err)
	})
}

// testSyncerRestart: while the syncer is down a Deployment is created and a
// ConfigMap deleted; the restarted syncer creates the one and finishes the
// deletion of the other (which waited for it).
func testSyncerRestart(t *testing.T, s *framework.Server, p *syncerProc, pc1 *kubernetes.Clientset, nsA, teamA string) {
	ctx := context.Background()
	p.stop()
	s.Kubectl(teamA, "create", "deployment", "api", "--image=nginx", "--replicas=2")
	if out, err := s.KubectlErr(teamA, "", "delete", "configmap", "web-config", "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := s.KubectlErr(teamA, "", "get", "configmap", "web-config"); err != nil {
		t.Errorf("the ConfigMap went before its downstream copy: %v\n%s", err, out)
	}
	p.start()
	framework.Eventually(t, 60*time.Second, "the restarted syncer to create api and delete web-config downstream", func() (bool, string) {
		_, errAPI := pc1.AppsV1().Deployments(nsA).Get(ctx, "api", metav1.GetOptions{})
		_, errCM := pc1.CoreV1().ConfigMaps(nsA).Get(ctx, "web-config", metav1.GetOptions{})
		out, errUp := s.KubectlErr(teamA, "", "get", "configmap", "web-config")
		return errAPI == nil && errCM != nil && errUp != nil, fmt.Sprintf("api: %v, web-config downstream: %v, upstream: %v %s", errAPI, errCM, errUp, out)
	})
}

// testPushModeRules: a server without --push-mode says so on a SyncTarget
// that asks for it; with it, kubeconfigs that would make kcp run a program,
// read a file or reach a refused address are refused.
func testPushModeRules(t *testing.T, s *framework.Server, compute string, push bool) {
	condition := func(name string) string {
		return s.Kubectl(compute, "get", "synctarget", name, "-o", `jsonpath={.status.conditions[?(@.type=="PushSyncer")].reason}`)
	}
	if !push {
		s.Kubectl(compute, "apply", "-f", framework.WriteFile(t, "pushed.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: SyncTarget
metadata: {name: pushed}
spec: {push: {secretNamespace: default, secretName: nothing}}
`))
		framework.Eventually(t, 30*time.Second, "a push-mode SyncTarget on a server without --push-mode to say so", func() (bool, string) {
			r := condition("pushed")
			return r == "PushModeOff", r
		})
		s.Kubectl(compute, "delete", "synctarget", "pushed")
		return
	}
	for name, kubeconfig := range map[string]string{
		"exec":     "users:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch /tmp/kcp-was-made-to-run-this']}\n",
		"file":     "users:\n- name: u\n  user:\n    tokenFile: /etc/shadow\n",
		"metadata": "users:\n- name: u\n  user: {token: x}\n",
	} {
		server := "https://127.0.0.1:1"
		if name == "metadata" {
			server = "http://169.254.169.254"
		}
		cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: '" + server + "'}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n" + kubeconfig
		s.Kubectl(compute, "create", "secret", "generic", "bad-"+name, "--from-file=kubeconfig="+framework.WriteFile(t, name+".kubeconfig", cfg))
		s.Kubectl(compute, "apply", "-f", framework.WriteFile(t, name+".yaml", fmt.Sprintf(`apiVersion: workload.kcp.io/v1alpha1
kind: SyncTarget
metadata: {name: bad-%s}
spec: {push: {secretNamespace: default, secretName: bad-%s}}
`, name, name)))
		framework.Eventually(t, 30*time.Second, "a push-mode kubeconfig with "+name+" to be refused", func() (bool, string) {
			r := condition("bad-" + name)
			return r == "InvalidKubeconfig", r
		})
		s.Kubectl(compute, "delete", "synctarget", "bad-"+name)
	}
	if _, err := os.Stat("/tmp/kcp-was-made-to-run-this"); err == nil {
		t.Errorf("kcp ran a tenant's exec plugin")
	}
}

// testCordon: a cordoned (unschedulable) target gets no new namespaces; the
// Placement says so; uncordoned, the namespace is assigned.
func testCordon(t *testing.T, s *framework.Server, compute string, placementYAML string) {
	const team = "root:team-d"
	s.CreateWorkspaces(team)
	admin := adminIn(t, s, compute)
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "cordon", "pc1"); err != nil || !strings.Contains(out, "SyncTarget pc1 cordoned") {
		t.Fatalf("kubectl kcp workload cordon: %v\n%s", err, out)
	}
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "cordon", "nope"); err == nil || !strings.Contains(out, "no SyncTarget nope") {
		t.Errorf("cordoning a missing SyncTarget: %v\n%s", err, out)
	}
	s.Kubectl(team, "apply", "-f", placementYAML)
	framework.Eventually(t, 30*time.Second, "a Placement whose only target is cordoned to say NoReadyTarget", func() (bool, string) {
		out := s.Kubectl(team, "get", "placement", "eu", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}`)
		return out == workload.ReasonNoReadyTarget, out
	})
	if ann := s.Kubectl(team, "get", "namespace", "default", "-o", "jsonpath={.metadata.annotations}"); strings.Contains(ann, workload.AssignedTargetAnnotation) {
		t.Errorf("a namespace was assigned to a cordoned target: %s", ann)
	}
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "uncordon", "pc1"); err != nil {
		t.Fatalf("kubectl kcp workload uncordon: %v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "the namespace to be assigned once the target is uncordoned", func() (bool, string) {
		ann := s.Kubectl(team, "get", "namespace", "default", "-o", "jsonpath={.metadata.annotations}")
		return strings.Contains(ann, `"workload.kcp.io/sync-target":"root:compute/pc1"`), ann
	})
}

func downClient(t *testing.T, pc *physical.Cluster) *kubernetes.Clientset {
	c, err := pc.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testSyncerView attacks the syncer's view with pc1's credential.
func testSyncerView(t *testing.T, s *framework.Server, kubeconfig, teamA, teamB string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	base, location, err := syncer.SplitServer(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, contentType, body string, headers ...string) (int, string) {
		req, _ := http.NewRequest(method, base+path, bytes.NewBufferString(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	view := "/services/syncer/" + string(location) + "/pc1"
	// Its one list across workspaces shows exactly what is assigned: the
	// two teams' objects, not the built-in CA bundle, not team-c's.
	s.CreateWorkspaces("root:team-c")
	s.Kubectl("root:team-c", "create", "configmap", "web-config", "--from-literal=secret=yes")
	code, body := do("GET", view+"/clusters/*/api/v1/configmaps", "", "", "Impersonate-User", "system:admin")
	var list struct {
		Items []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("the syncer's list of configmaps: %d %s", code, body)
	}
	var seen []string
	for _, it := range list.Items {
		seen = append(seen, it.Metadata.Annotations[logicalcluster.Annotation]+"/"+it.Metadata.Name)
	}
	if strings.Join(seen, ",") != teamA+"/forged,"+teamA+"/web-config" {
		t.Errorf("the syncer view lists %v, want only team-a's forged and web-config", seen)
	}
	// Other resources list nothing: kcp assigned nothing of them.
	if code, body := do("GET", view+"/clusters/*/apis/rbac.authorization.k8s.io/v1/clusterroles", "", ""); code != 200 || strings.Contains(body, `"name"`) {
		t.Errorf("the syncer view lists cluster roles: %d %s", code, body)
	}
	for _, c := range []struct {
		what                 string
		method, path, ct, in string
		want                 int
	}{
		{"another target's view", "GET", "/services/syncer/" + string(location) + "/pc2/clusters/*/api/v1/configmaps", "", "", 403},
		{"a get", "GET", view + "/clusters/" + teamA + "/api/v1/namespaces/default/configmaps/web-config", "", "", 403},
		{"a spec patch", "PATCH", view + "/clusters/" + teamA + "/apis/apps/v1/namespaces/default/deployments/web", "application/merge-patch+json", `{"spec":{"replicas":9}}`, 403},
		{"a status patch that also sets labels", "PATCH", view + "/clusters/" + teamA + "/apis/apps/v1/namespaces/default/deployments/web/status", "application/merge-patch+json", `{"status":{},"metadata":{"labels":{"x":"y"}}}`, 403},
		{"another target's status annotation", "PATCH", view + "/clusters/" + teamA + "/apis/apps/v1/namespaces/default/deployments/web/status", "application/merge-patch+json",
			`{"metadata":{"annotations":{"` + workload.StatusAnnotationPrefix + workload.TargetKey(location.String(), "pc2") + `":"{}"}}}`, 403},
		{"its status annotation and a label", "PATCH", view + "/clusters/" + teamA + "/apis/apps/v1/namespaces/default/deployments/web/status", "application/merge-patch+json",
			`{"metadata":{"annotations":{"` + workload.StatusAnnotationPrefix + workload.TargetKey(location.String(), "pc1") + `":"{}"},"labels":{"x":"y"}}}`, 403},
		{"its status annotation through the object, not status", "PATCH", view + "/clusters/" + teamA + "/apis/apps/v1/namespaces/default/deployments/web", "application/merge-patch+json",
			`{"metadata":{"annotations":{"` + workload.StatusAnnotationPrefix + workload.TargetKey(location.String(), "pc1") + `":"{}"}}}`, 403},
		{"a status patch of an unassigned object", "PATCH", view + "/clusters/root:team-c/api/v1/namespaces/default/configmaps/web-config/status", "application/merge-patch+json", `{"status":{}}`, 404},
		{"removing another finalizer", "PATCH", view + "/clusters/" + teamA + "/apis/apps/v1/namespaces/default/deployments/web", "application/json-patch+json", `[{"op":"test","path":"/metadata/finalizers/0","value":"other"},{"op":"remove","path":"/metadata/finalizers/0"}]`, 403},
		{"a delete", "DELETE", view + "/clusters/" + teamA + "/apis/apps/v1/namespaces/default/deployments/web", "", "", 403},
		{"a create", "POST", view + "/clusters/" + teamA + "/api/v1/namespaces/default/configmaps", "application/json", `{"metadata":{"name":"x"}}`, 403},
		{"a status patch of a workspace that is not placed there", "PATCH", view + "/clusters/root:team-c/apis/apps/v1/namespaces/default/deployments/web/status", "application/merge-patch+json", `{"status":{"replicas":1}}`, 404},
		{"the wildcard without the view (its token is valid only in its workspace)", "GET", "/clusters/*/api/v1/configmaps", "", "", 401},
		// Tokens for its pods: only of namespaces assigned to its target,
		// for kcp's audiences, bound to nothing, of a bounded life.
		{"a token for a pod in a workspace not placed there", "POST", view + "/clusters/root:team-c/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", `{"spec":{}}`, 404},
		{"a token of another audience", "POST", view + "/clusters/" + teamA + "/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", `{"spec":{"audiences":["vault"]}}`, 403},
		{"a token bound to an object of its choosing", "POST", view + "/clusters/" + teamA + "/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", `{"spec":{"boundObjectRef":{"kind":"Secret","apiVersion":"v1","name":"x"}}}`, 403},
		{"a token of ten years", "POST", view + "/clusters/" + teamA + "/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", `{"spec":{"expirationSeconds":315360000}}`, 400},
		{"a token across all workspaces", "POST", view + "/clusters/*/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", `{"spec":{}}`, 403},
		{"a token for its pods", "POST", view + "/clusters/" + teamA + "/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", `{"spec":{"expirationSeconds":3600}}`, 201},
	} {
		if code, body := do(c.method, c.path, c.ct, c.in); code != c.want {
			t.Errorf("syncer credential, %s: got %d, want %d: %s", c.what, code, c.want, body)
		}
	}
	if out := s.Kubectl(teamB, "get", "deployment", "web", "-o", "jsonpath={.metadata.finalizers}"); !strings.Contains(out, workload.FinalizerPrefix) {
		t.Errorf("team-b's Deployment has no syncer finalizer: %s", out)
	}
}
