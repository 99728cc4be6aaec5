package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// kindsApp is an ordinary application's manifests, applied unchanged: a
// StatefulSet with a volume claim template, a DaemonSet, a Job, a
// CronJob, a PodDisruptionBudget, an autoscaler, a NetworkPolicy, a claim
// of a class no cluster has, and the RBAC it grants its ServiceAccount.
const kindsApp = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres, volumeMounts: [{name: data, mountPath: /var/lib/postgresql}]}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: fluent-bit}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  completions: 2
  template:
    spec: {restartPolicy: Never, containers: [{name: migrate, image: busybox, command: [sh, -c, "true"]}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec: {restartPolicy: Never, containers: [{name: tick, image: busybox}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: db}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 6
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{podSelector: {matchLabels: {app: web}}}, {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: frontend}}}]}]
  egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: kube-dns}}}]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: scratch}
spec: {storageClassName: fast, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: app}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: app}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: app}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app}
subjects:
- {kind: ServiceAccount, name: app, namespace: default}
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: app-edit}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{kind: ServiceAccount, name: app, namespace: default}]
`

// TestWorkloadKinds applies kindsApp in a workspace placed (Duplicate) on
// two physical clusters: every object is accepted; the StatefulSet, the
// Job and the CronJob run on exactly one cluster (the namespace's first
// target), the others on both; the StatefulSet's claim binds to a static
// volume there, the Job completes, the CronJob runs once per schedule;
// status comes back; the Role and RoleBinding land in the mapped namespace
// only, with the subjects rewritten, and grant nothing outside it; the
// RoleBinding to ClusterRole edit stays in the workspace, with a warning.
func TestWorkloadKinds(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:kinds"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	down := map[string]*kubernetes.Clientset{}
	for _, name := range []string{"pc1", "pc2"} {
		register(t, s, admin, name, "region=eu", pcs[name])
		down[name] = downClient(t, pcs[name])
		// The physical clusters have no provisioner: their operator offers
		// static volumes.
		staticVolume(t, down[name], "pv-"+name)
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: both}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true}
`))
	framework.Eventually(t, 60*time.Second, "default on both clusters", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1,root:compute/pc2", a
	})

	out := s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "app.yaml", kindsApp))
	framework.MustContain(t, "kubectl apply", out, "statefulset.apps/db created", "daemonset.apps/agent created", "job.batch/migrate created",
		"cronjob.batch/tick created", "poddisruptionbudget.policy/db created", "horizontalpodautoscaler.autoscaling/web created",
		"networkpolicy.networking.k8s.io/db created", "deployment.apps/web created", "persistentvolumeclaim/scratch created", "role.rbac.authorization.k8s.io/app created",
		"rolebinding.rbac.authorization.k8s.io/app created",
		// What kcp will not do says so.
		`statefulsets.apps "db" runs on one physical cluster only`, `jobs.batch "migrate" runs on one physical cluster only`,
		`RoleBinding "app-edit" is not synced to the physical clusters`, `RoleBinding "app": subjects User alice are identities of kcp`)

	one, other := "pc1", "pc2"
	if workload.TargetKey(compute, "pc2") < workload.TargetKey(compute, "pc1") {
		one, other = "pc2", "pc1"
	}
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()
	dyn := map[string]dynamic.Interface{}
	for name, pc := range pcs {
		dyn[name] = downDynamic(t, pc)
	}
	exists := func(pc string, gvr schema.GroupVersionResource, name string) bool {
		_, err := dyn[pc].Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil
	}
	gvr := func(group, version, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	}
	everywhere := map[schema.GroupVersionResource]string{
		gvr("apps", "v1", "daemonsets"): "agent", gvr("policy", "v1", "poddisruptionbudgets"): "db",
		gvr("autoscaling", "v2", "horizontalpodautoscalers"): "web", gvr("networking.k8s.io", "v1", "networkpolicies"): "db",
		gvr("", "v1", "persistentvolumeclaims"): "scratch", gvr("rbac.authorization.k8s.io", "v1", "roles"): "app",
		gvr("rbac.authorization.k8s.io", "v1", "rolebindings"): "app",
	}
	onlyOne := map[schema.GroupVersionResource]string{
		gvr("apps", "v1", "statefulsets"): "db", gvr("batch", "v1", "jobs"): "migrate", gvr("batch", "v1", "cronjobs"): "tick",
	}
	framework.Eventually(t, 60*time.Second, "every kind downstream", func() (bool, string) {
		for r, name := range everywhere {
			for _, pc := range []string{"pc1", "pc2"} {
				if !exists(pc, r, name) {
					return false, r.Resource + "/" + name + " missing on " + pc
				}
			}
		}
		for r, name := range onlyOne {
			if !exists(one, r, name) {
				return false, r.Resource + "/" + name + " missing on " + one
			}
		}
		return true, ""
	})
	for r, name := range onlyOne {
		if exists(other, r, name) {
			t.Errorf("%s/%s runs on %s too: it must run on one cluster only", r.Resource, name, other)
		}
	}
	if exists("pc1", gvr("rbac.authorization.k8s.io", "v1", "rolebindings"), "app-edit") ||
		exists("pc2", gvr("rbac.authorization.k8s.io", "v1", "rolebindings"), "app-edit") {
		t.Error("a RoleBinding to ClusterRole edit went to a physical cluster")
	}

	// The NetworkPolicy's namespace names are the workspace's namespaces
	// as they run there; the DNS rule keeps the physical kube-system.
	np, err := down[other].NetworkingV1().NetworkPolicies(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := np.Spec.Ingress[0].From[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; got != syncer.DownstreamNamespace(logicalcluster.Name(team), "frontend") {
		t.Errorf("the NetworkPolicy's namespace frontend is %q downstream, not the workspace's frontend", got)
	}
	if got := np.Spec.Egress[0].To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; got != "kube-system" {
		t.Errorf("the DNS egress rule names %q downstream", got)
	}

	// The RoleBinding names the downstream service account, nobody else.
	rb, err := down[other].RbacV1().RoleBindings(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Namespace != ns || rb.Subjects[0].Name != "app" {
		t.Errorf("downstream subjects: %+v", rb.Subjects)
	}
	// It grants in the mapped namespace only.
	sa := "system:serviceaccount:" + ns + ":app"
	for _, c := range []struct {
		namespace string
		want      bool
	}{{ns, true}, {"default", false}, {"kube-system", false}} {
		if got := allowed(t, down[other], sa, c.namespace); got != c.want {
			t.Errorf("%s may list configmaps in %s: %v, want %v", sa, c.namespace, got, c.want)
		}
	}

	// Status comes back: the StatefulSet's claim bound to the static
	// volume and its pod ready; the Job complete; the claim of a class no
	// cluster has Pending; the autoscaler's and the budget's conditions.
	if out, err := s.KubectlErr(team, "", "rollout", "status", "statefulset/db", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status statefulset/db: %v\n%s\n%s", err, out, s.Kubectl(team, "get", "statefulset", "db", "-o", "yaml"))
	}
	if pvc, err := down[one].CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{}); err != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Errorf("the StatefulSet's claim on %s: %v %v", one, err, pvc)
	}
	if out, err := s.KubectlErr(team, "", "wait", "--for=condition=Complete", "job/migrate", "--timeout=90s"); err != nil {
		t.Fatalf("wait for job/migrate: %v\n%s\n%s", err, out, s.Kubectl(team, "get", "job", "migrate", "-o", "yaml"))
	}
	framework.MustContain(t, "kubectl get job", s.Kubectl(team, "get", "job", "migrate"), "2/2")

	// A Pod created directly runs once, on the namespace's first cluster.
	framework.MustContain(t, "kubectl run", s.Kubectl(team, "run", "one", "--image=nginx"), "pod/one created", "runs on one physical cluster only")
	if out, err := s.KubectlErr(team, "", "wait", "--for=condition=Ready", "pod/one", "--timeout=60s"); err != nil {
		t.Fatalf("wait for pod/one: %v\n%s\n%s", err, out, s.Kubectl(team, "get", "pod", "one", "-o", "yaml"))
	}
	if !exists(one, gvr("", "v1", "pods"), "one") || exists(other, gvr("", "v1", "pods"), "one") {
		t.Errorf("pod/one must run on %s only", one)
	}
	s.Kubectl(team, "delete", "pod", "one", "--wait=true", "--timeout=60s")
	framework.Eventually(t, 60*time.Second, "status of the others", func() (bool, string) {
		got := s.Kubectl(team, "get", "pvc/scratch", "hpa/web", "pdb/db", "daemonset/agent", "-o",
			`jsonpath={range .items[*]}{.kind}:{.status.phase}{.status.conditions[0].type}{.status.desiredNumberScheduled} {end}`)
		return strings.Contains(got, "PersistentVolumeClaim:Pending") && strings.Contains(got, "HorizontalPodAutoscaler:AbleToScale") &&
			strings.Contains(got, "PodDisruptionBudget:DisruptionAllowed") && !strings.Contains(got, "DaemonSet: "), got
	})

	// The autoscaler on each cluster owns the Deployment's replicas there
	// (it raises them to its minimum, 2): a change of the Deployment in
	// kcp goes down without undoing that.
	framework.Eventually(t, 60*time.Second, "the autoscalers to scale web to their minimum", func() (bool, string) {
		got := ""
		for _, pc := range []string{"pc1", "pc2"} {
			d, err := down[pc].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got += fmt.Sprintf("%s=%d ", pc, *d.Spec.Replicas)
		}
		return got == "pc1=2 pc2=2 ", got
	})
	s.Kubectl(team, "annotate", "deployment", "web", "note=changed")
	framework.Eventually(t, 30*time.Second, "the annotation downstream, replicas left to the autoscaler", func() (bool, string) {
		d, err := down[one].AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || d.Annotations["note"] != "changed" {
			return false, fmt.Sprint(err)
		}
		if *d.Spec.Replicas != 2 {
			t.Errorf("the syncer undid the autoscaler: replicas %d", *d.Spec.Replicas)
		}
		return true, ""
	})

	// The CronJob runs once per schedule, on one cluster, and its last
	// schedule shows in the workspace.
	framework.Eventually(t, 100*time.Second, "the CronJob to have run", func() (bool, string) {
		got := s.Kubectl(team, "get", "cronjob", "tick", "-o", "jsonpath={.status.lastScheduleTime}")
		return got != "", got
	})
	jobs, err := down[one].BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ticks := 0
	for _, j := range jobs.Items {
		if strings.HasPrefix(j.Name, "tick-") {
			ticks++
		}
	}
	otherJobs, _ := down[other].BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if ticks == 0 || len(otherJobs.Items) != 0 {
		t.Errorf("CronJob runs: %d on %s, %d jobs on %s", ticks, one, len(otherJobs.Items), other)
	}

	for _, kind := range []string{"statefulset/db", "daemonset/agent", "job/migrate", "cronjob/tick", "pdb/db", "hpa/web", "networkpolicy/db", "pvc/scratch", "rolebinding/app"} {
		if out, err := s.KubectlErr(team, "", "describe", kind); err != nil {
			t.Errorf("kubectl describe %s: %v\n%s", kind, err, out)
		}
	}

	// Every kind's schema is negotiated from the physical clusters.
	negotiated := s.Kubectl(compute, "get", "negotiatedapiresources", "-o", "name")
	for _, r := range workload.WorkloadResources {
		if !strings.Contains(negotiated, "/"+r.Resource+".") {
			t.Errorf("no negotiated %s in %s:\n%s", r, compute, negotiated)
		}
	}

	// Deleted in the workspace, gone downstream first.
	s.Kubectl(team, "delete", "-f", framework.WriteFile(t, "app.yaml", kindsApp), "--wait=true", "--timeout=60s")
	for r, name := range onlyOne {
		if exists(one, r, name) {
			t.Errorf("%s/%s still on %s after its deletion", r.Resource, name, one)
		}
	}

	// Divide: the StatefulSet still runs once, on the same first target,
	// its claim bound there; each cluster's autoscaler gets its share of
	// the bounds.
	const divided = "root:kinds-divide"
	s.CreateWorkspaces(divided)
	for _, name := range []string{"pc1", "pc2"} {
		staticVolume(t, down[name], "pv-"+name+"-divide")
	}
	s.Kubectl(divided, "apply", "-f", framework.WriteFile(t, "divide.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: both}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, allClusters: true, mode: Divide}
`))
	framework.Eventually(t, 60*time.Second, "default on both clusters", func() (bool, string) {
		a := s.Kubectl(divided, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1,root:compute/pc2", a
	})
	out = s.Kubectl(divided, "apply", "-f", framework.WriteFile(t, "app.yaml", kindsApp))
	framework.MustContain(t, "kubectl apply (Divide)", out, `statefulsets.apps "db" runs on one physical cluster only`)
	if out, err := s.KubectlErr(divided, "", "rollout", "status", "statefulset/db", "--timeout=90s"); err != nil {
		t.Fatalf("rollout status statefulset/db (Divide): %v\n%s", err, out)
	}
	dns := syncer.DownstreamNamespace(logicalcluster.Name(divided), "default")
	if _, err := down[other].AppsV1().StatefulSets(dns).Get(ctx, "db", metav1.GetOptions{}); err == nil {
		t.Errorf("the divided StatefulSet runs on %s too", other)
	}
	framework.Eventually(t, 30*time.Second, "each autoscaler with half the bounds", func() (bool, string) {
		got := ""
		for _, pc := range []string{"pc1", "pc2"} {
			h, err := down[pc].AutoscalingV2().HorizontalPodAutoscalers(dns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got += fmt.Sprintf("%s=%d..%d ", pc, *h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		return got == "pc1=1..3 pc2=1..3 ", got
	})
}

func staticVolume(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
	}}
	if _, err := c.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func downDynamic(t *testing.T, pc *physical.Cluster) dynamic.Interface {
	cfg, err := pc.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// allowed asks the physical cluster whether user may list configmaps in
// namespace.
func allowed(t *testing.T, c kubernetes.Interface, user, namespace string) bool {
	t.Helper()
	r, err := c.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "list", Resource: "configmaps"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}
