package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// preexisting creates, directly on the physical cluster, a Deployment kcp
// did not create (selector app=<name>, as kubectl create deployment
// makes), with extra labels.
func preexisting(t *testing.T, c kubernetes.Interface, ns, name, image string, replicas int32, labels map[string]string) {
	t.Helper()
	l := map[string]string{"app": name}
	for k, v := range labels {
		l[k] = v
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: image}}},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptOrRefuse: objects that already run on a physical cluster and
// were not created by kcp are never overwritten silently. With the
// Placement's conflictResolution Refuse (the default) the syncer leaves
// them (the downstream namespace as well as an object in kcp's own
// namespace) and says so: a DownstreamConflict condition on the workspace's
// Deployment and the SyncTarget's status.conflicts. With Adopt it takes
// them over and kcp's replicas and image apply; downstream objects the
// workspace does not have stay. Security rows: another SyncTarget's copy
// is never adopted, and deleting the workspace's object does not delete
// someone else's downstream (nor does its deletion hang); a bad
// conflictResolution is refused.
func TestAdoptOrRefuse(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:migrate"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	down := downClient(t, pcs["pc1"])
	ctx := context.Background()
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")

	// What ran before the team moved onto kcp: the namespace, web (the
	// application), theirs (not in the workspace), and owned, a copy of
	// another SyncTarget's syncer.
	if _, err := down.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	preexisting(t, down, ns, "web", "nginx:before", 1, nil)
	preexisting(t, down, ns, "theirs", "nginx:before", 1, nil)
	preexisting(t, down, ns, "owned", "nginx:before", 1, map[string]string{syncer.TargetLabel: "anothertarget"})
	for _, name := range []string{"web", "owned"} {
		s.Kubectl(team, "create", "deployment", name, "--image=nginx:kcp", "--replicas=3")
	}
	if out, err := s.KubectlErr(team, "", "apply", "-f", framework.WriteFile(t, "bad.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, conflictResolution: Steal}
`)); err == nil || !strings.Contains(out, "conflictResolution") {
		t.Errorf("conflictResolution Steal: %v\n%s", err, out)
	}
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}}
`))
	get := func(name string) (*appsv1.Deployment, string) {
		d, err := down.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err.Error()
		}
		return d, fmt.Sprintf("image %s replicas %d label %q", d.Spec.Template.Spec.Containers[0].Image, *d.Spec.Replicas, d.Labels[syncer.TargetLabel])
	}
	untouched := func(name, label string) func() (bool, string) {
		return func() (bool, string) {
			d, got := get(name)
			return d != nil && d.Spec.Template.Spec.Containers[0].Image == "nginx:before" && *d.Spec.Replicas == 1 && d.Labels[syncer.TargetLabel] == label, got
		}
	}
	condition := func(name string) string {
		return s.Kubectl(team, "get", "deployment", name, "-o", `jsonpath={.status.conditions[?(@.type=="DownstreamConflict")].status} {.status.conditions[?(@.type=="DownstreamConflict")].message}`)
	}

	// Refuse (the default): the namespace is not kcp's, so nothing of the
	// workspace is written into it, and the workspace is told.
	framework.Eventually(t, 60*time.Second, "web's DownstreamConflict condition naming the namespace", func() (bool, string) {
		c := condition("web")
		return strings.HasPrefix(c, "True namespace "+ns+" exists on the physical cluster and was not created by kcp: not overwritten"), c
	})
	framework.Eventually(t, 30*time.Second, "the SyncTarget to count the conflicts", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", "jsonpath={.status.conflicts.count} {.status.conflicts.objects[*].name}")
		return got == "2 owned web", got
	})
	holdsFor(t, 5*time.Second, "with Refuse, web downstream stays as it was", untouched("web", ""))
	if got, _ := down.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); got.Labels[syncer.TargetLabel] != "" {
		t.Errorf("the refused namespace got kcp's label: %v", got.Labels)
	}

	// Adopt: the namespace and web are taken over, kcp's spec applies.
	s.Kubectl(team, "patch", "placement", "eu", "--type=merge", "-p", `{"spec":{"conflictResolution":"Adopt"}}`)
	framework.Eventually(t, 60*time.Second, "web adopted: kcp's image and replicas", func() (bool, string) {
		d, got := get("web")
		return d != nil && d.Spec.Template.Spec.Containers[0].Image == "nginx:kcp" && *d.Spec.Replicas == 3 && d.Labels[syncer.TargetLabel] != "", got
	})
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
		t.Errorf("rollout status of the adopted Deployment: %v\n%s", err, out)
	}
	if c := condition("web"); c != " " {
		t.Errorf("web's DownstreamConflict condition after adoption: %q", c)
	}
	if got, _ := down.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); got.Labels[syncer.TargetLabel] == "" || got.Annotations[syncer.UpstreamClusterAnnotation] != team {
		t.Errorf("the adopted namespace: labels %v annotations %v", got.Labels, got.Annotations)
	}
	// Security row: another SyncTarget's copy is not adopted.
	framework.Eventually(t, 30*time.Second, "owned refused as another SyncTarget's", func() (bool, string) {
		c := condition("owned")
		return strings.HasPrefix(c, "True deployments.apps "+ns+"/owned exists on the physical cluster and belongs to another SyncTarget's syncer"), c
	})
	holdsFor(t, 3*time.Second, "owned downstream stays as it was", untouched("owned", "anothertarget"))
	framework.Eventually(t, 30*time.Second, "the SyncTarget to count one conflict", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", "pc1", "-o", "jsonpath={.status.conflicts.count} {.status.conflicts.objects[*].name}")
		return got == "1 owned", got
	})
	// What the workspace does not have stays.
	if ok, got := untouched("theirs", "")(); !ok {
		t.Errorf("a downstream Deployment the workspace does not have: %s", got)
	}
	// Security row: another tenant's Adopt, with the same names, adopts
	// nothing of this workspace's: its namespace is its own.
	const other = "root:intruder"
	s.CreateWorkspaces(other)
	s.Kubectl(other, "apply", "-f", framework.WriteFile(t, "adopt.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: grab}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}, conflictResolution: Adopt}
`))
	for _, name := range []string{"web", "theirs"} {
		s.Kubectl(other, "create", "deployment", name, "--image=nginx:intruder", "--replicas=1")
	}
	otherNS := syncer.DownstreamNamespace(logicalcluster.Name(other), "default")
	framework.Eventually(t, 60*time.Second, "the other tenant's copies in its own namespace", func() (bool, string) {
		n := 0
		for _, name := range []string{"web", "theirs"} {
			if d, err := down.AppsV1().Deployments(otherNS).Get(ctx, name, metav1.GetOptions{}); err == nil && d.Spec.Template.Spec.Containers[0].Image == "nginx:intruder" {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d of 2", n)
	})
	if d, got := get("web"); d == nil || d.Spec.Template.Spec.Containers[0].Image != "nginx:kcp" || *d.Spec.Replicas != 3 {
		t.Errorf("this workspace's adopted web after another tenant's Adopt: %s", got)
	}
	if ok, got := untouched("theirs", "")(); !ok {
		t.Errorf("theirs after another tenant's Adopt of the same name: %s", got)
	}

	// Deleting the workspace's owned does not delete the other syncer's
	// copy, and does not wait for it.
	if out, err := s.KubectlErr(team, "", "delete", "deployment", "owned", "--timeout=60s"); err != nil {
		t.Errorf("deleting a Deployment whose name is taken downstream: %v\n%s", err, out)
	}
	if ok, got := untouched("owned", "anothertarget")(); !ok {
		t.Errorf("the other SyncTarget's copy after the workspace's owned was deleted: %s", got)
	}

	// Back to Refuse: an object someone created by hand in kcp's own
	// namespace is not overwritten either, and the condition names it.
	s.Kubectl(team, "patch", "placement", "eu", "--type=merge", "-p", `{"spec":{"conflictResolution":null}}`)
	framework.Eventually(t, 30*time.Second, "the namespace's policy back to Refuse", func() (bool, string) {
		p := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/placement}`)
		return !strings.Contains(p, "Adopt"), p
	})
	time.Sleep(3 * time.Second) // the syncer sees the namespace through its own watch
	preexisting(t, down, ns, "sneaky", "nginx:before", 1, nil)
	s.Kubectl(team, "create", "deployment", "sneaky", "--image=nginx:kcp", "--replicas=3")
	framework.Eventually(t, 60*time.Second, "sneaky's DownstreamConflict condition", func() (bool, string) {
		c := condition("sneaky")
		return strings.HasPrefix(c, "True deployments.apps "+ns+"/sneaky exists on the physical cluster and was not created by kcp: not overwritten"), c
	})
	holdsFor(t, 5*time.Second, "sneaky downstream stays as it was", untouched("sneaky", ""))
	// The adopted web stays kcp's.
	s.Kubectl(team, "scale", "deployment", "web", "--replicas=2")
	framework.Eventually(t, 30*time.Second, "the adopted web follows kcp", func() (bool, string) {
		d, got := get("web")
		return d != nil && *d.Spec.Replicas == 2, got
	})

	// The Placement goes: kcp's copies go, the adopted namespace is
	// released, not deleted, and what was not the workspace's stays.
	s.Kubectl(team, "delete", "placement", "eu")
	framework.Eventually(t, 60*time.Second, "web deleted downstream and the namespace released", func() (bool, string) {
		_, err := down.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		got, nsErr := down.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if nsErr != nil {
			return false, "the adopted namespace: " + nsErr.Error()
		}
		return apierrors.IsNotFound(err) && got.Labels[syncer.TargetLabel] == "" && got.Annotations[syncer.AdoptedAnnotation] == "",
			fmt.Sprintf("web: %v, namespace labels %v annotations %v", err, got.Labels, got.Annotations)
	})
	for name, label := range map[string]string{"theirs": "", "sneaky": "", "owned": "anothertarget"} {
		if ok, got := untouched(name, label)(); !ok {
			t.Errorf("%s, not the workspace's, after the Placement went: %s", name, got)
		}
	}
	if got, err := down.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("the adopted namespace was deleted: %v", err)
	}
}
