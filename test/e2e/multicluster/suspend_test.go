package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// holdsFor checks cond again and again for d: it must hold every time
// (what a suspended sync must not do could happen at any moment).
func holdsFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if ok, got := cond(); !ok {
			t.Fatalf("%s: %s", what, got)
		}
	}
}

// TestSuspend: a Placement's spec.suspend pauses syncing its namespaces
// (incident handling): a new image, a deleted Deployment and a new
// ConfigMap do not reach the physical cluster (what runs there runs on,
// the deleted Deployment waits upstream with its finalizer), status is
// still reported, the Placement says Suspended=True, and a drain does not
// move the namespace (the drain status says why). Resuming catches up.
// spec.suspendTargets does the same for one SyncTarget; a bad name is
// refused.
func TestSuspend(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:incident"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1", "pc2")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	register(t, s, admin, "pc2", "region=eu", pcs["pc2"])
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec: {locationWorkspace: "root:compute", namespaceSelector: {}}
`))
	assigned := func() string {
		return s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
	}
	framework.Eventually(t, 60*time.Second, "the namespace to be assigned", func() (bool, string) {
		a := assigned()
		return a != "", a
	})
	for _, name := range []string{"web", "gone"} {
		s.Kubectl(team, "create", "deployment", name, "--image=nginx:1.0", "--replicas=2")
		if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/"+name, "--timeout=120s"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	on := strings.TrimPrefix(assigned(), compute+"/")
	down := downClient(t, pcs[on])
	ns := syncer.DownstreamNamespace(logicalcluster.Name(team), "default")
	ctx := context.Background()
	image := func(c kubernetes.Interface, name string) string {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}
	policy := func() string {
		return s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/placement}`)
	}

	// Suspend the Placement.
	s.Kubectl(team, "patch", "placement", "eu", "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	framework.Eventually(t, 30*time.Second, "Suspended=True on the Placement", func() (bool, string) {
		got := s.Kubectl(team, "get", "placement", "eu", "-o", `jsonpath={.status.conditions[?(@.type=="Suspended")].status} {.status.conditions[?(@.type=="Suspended")].message}`)
		return strings.HasPrefix(got, "True syncing is paused for the 1 assigned namespace(s)"), got
	})
	framework.Eventually(t, 30*time.Second, "the namespace's policy to say suspended", func() (bool, string) {
		p := policy()
		return strings.Contains(p, `"suspended":true`), p
	})
	// The syncer sees the namespace through its own watch: let it.
	time.Sleep(3 * time.Second)

	s.Kubectl(team, "set", "image", "deployment/web", "nginx=nginx:2.0")
	s.Kubectl(team, "delete", "deployment", "gone", "--wait=false")
	s.Kubectl(team, "create", "configmap", "later", "--from-literal=a=b")
	holdsFor(t, 10*time.Second, "while suspended, the physical cluster keeps what it ran", func() (bool, string) {
		if img := image(down, "web"); img != "nginx:1.0" {
			return false, "web's image downstream is " + img
		}
		if img := image(down, "gone"); img != "nginx:1.0" {
			return false, "the deleted Deployment downstream: " + img
		}
		if _, err := down.CoreV1().ConfigMaps(ns).Get(ctx, "later", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("the ConfigMap created while suspended is downstream (%v)", err)
		}
		return true, ""
	})
	// Upstream, the deletion waits (its finalizer stays), and status is
	// still the physical cluster's.
	if got := s.Kubectl(team, "get", "deployment", "gone", "-o", "jsonpath={.metadata.deletionTimestamp}|{.metadata.finalizers}"); !strings.Contains(got, "|") || strings.HasPrefix(got, "|") || !strings.Contains(got, "workload.kcp.io/syncer-") {
		t.Errorf("the deleted Deployment upstream: %q, want it terminating with the syncer's finalizer", got)
	}
	if got := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.status.availableReplicas}"); got != "2" {
		t.Errorf("web's status upstream while suspended: available %q, want 2", got)
	}
	// Scaling the running copy by hand on the physical cluster (an
	// operator handling the incident) is left alone too.
	if _, err := down.AppsV1().Deployments(ns).Patch(ctx, "web", "application/merge-patch+json", []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the hand-scaled copy's status reported upstream", func() (bool, string) {
		got := s.Kubectl(team, "get", "deployment", "web", "-o", "jsonpath={.status.replicas}")
		return got == "3", got
	})

	// A drain does not move a suspended namespace, and says why.
	if out, err := s.KubectlPlugin(admin, "kcp", "workload", "drain", on); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	framework.Eventually(t, 30*time.Second, "the drain to name the suspension", func() (bool, string) {
		got := s.Kubectl(compute, "get", "synctarget", on, "-o", "jsonpath={.status.drain.stuck} {.status.drain.blocked[0].reason}")
		return strings.HasPrefix(got, "1 Placement eu is suspended"), got
	})
	holdsFor(t, 5*time.Second, "the suspended namespace stays on the draining target", func() (bool, string) {
		a := assigned()
		return a == compute+"/"+on, a
	})
	s.KubectlPlugin(admin, "kcp", "workload", "uncordon", on)

	// Resume: everything done meanwhile reaches the physical cluster.
	s.Kubectl(team, "patch", "placement", "eu", "--type=merge", "-p", `{"spec":{"suspend":null}}`)
	framework.Eventually(t, 60*time.Second, "resumed: the new image, the deletion and the ConfigMap downstream", func() (bool, string) {
		img := image(down, "web")
		_, goneErr := down.AppsV1().Deployments(ns).Get(ctx, "gone", metav1.GetOptions{})
		_, cmErr := down.CoreV1().ConfigMaps(ns).Get(ctx, "later", metav1.GetOptions{})
		return img == "nginx:2.0" && apierrors.IsNotFound(goneErr) && cmErr == nil, fmt.Sprintf("image %s, gone: %v, configmap: %v", img, goneErr, cmErr)
	})
	framework.Eventually(t, 30*time.Second, "the deleted Deployment gone upstream", func() (bool, string) {
		out, err := s.KubectlErr(team, "", "get", "deployment", "gone")
		return err != nil && strings.Contains(out, "NotFound"), out
	})
	if out, err := s.KubectlErr(team, "", "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
		t.Errorf("rollout status after resume: %v\n%s", err, out)
	}
	if got := s.Kubectl(team, "get", "placement", "eu", "-o", `jsonpath={.status.conditions[?(@.type=="Suspended")].status}/{.status.conditions[?(@.type=="Suspended")].reason}`); got != "False/Resumed" {
		t.Errorf("Suspended condition after resume: %q", got)
	}
	framework.Eventually(t, 30*time.Second, "kcp's replicas applied again over the hand-scaled copy", func() (bool, string) {
		d, err := down.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return *d.Spec.Replicas == 2, fmt.Sprint(*d.Spec.Replicas)
	})

	// One target: spec.suspendTargets. A bad name is refused.
	if out, err := s.KubectlErr(team, "", "patch", "placement", "eu", "--type=merge", "-p", `{"spec":{"suspendTargets":["PC 1"]}}`); err == nil || !strings.Contains(out, "suspendTargets") {
		t.Errorf("a bad SyncTarget name in suspendTargets: %v\n%s", err, out)
	}
	s.Kubectl(team, "patch", "placement", "eu", "--type=merge", "-p", `{"spec":{"suspendTargets":["`+on+`","nosuch"]}}`)
	framework.Eventually(t, 30*time.Second, "Suspended=True naming the target", func() (bool, string) {
		got := s.Kubectl(team, "get", "placement", "eu", "-o", `jsonpath={.status.conditions[?(@.type=="Suspended")].reason} {.status.conditions[?(@.type=="Suspended")].message}`)
		return strings.HasPrefix(got, "TargetsSuspended syncing to SyncTarget(s) "+on+", nosuch (no such SyncTarget in root:compute) is paused"), got
	})
	framework.Eventually(t, 30*time.Second, "the namespace's policy to say suspended", func() (bool, string) {
		p := policy()
		return strings.Contains(p, `"suspended":true`), p
	})
	time.Sleep(3 * time.Second)
	s.Kubectl(team, "set", "image", "deployment/web", "nginx=nginx:3.0")
	holdsFor(t, 8*time.Second, "the suspended target keeps the old image", func() (bool, string) {
		img := image(down, "web")
		return img == "nginx:2.0", img
	})
	s.Kubectl(team, "patch", "placement", "eu", "--type=json", "-p", `[{"op":"remove","path":"/spec/suspendTargets"}]`)
	framework.Eventually(t, 60*time.Second, "the new image once the target is resumed", func() (bool, string) {
		img := image(down, "web")
		return img == "nginx:3.0", img
	})
}
