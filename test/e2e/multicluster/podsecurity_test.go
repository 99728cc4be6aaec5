package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

const privilegedPod = `apiVersion: v1
kind: Pod
metadata: {name: root-shell}
spec: {containers: [{name: sh, image: busybox, securityContext: {privileged: true}}]}
`

const hostPathDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: node-reader}
spec:
  replicas: 1
  selector: {matchLabels: {app: node-reader}}
  template:
    metadata: {labels: {app: node-reader}}
    spec:
      containers: [{name: r, image: busybox, volumeMounts: [{name: host, mountPath: /host}]}]
      volumes: [{name: host, hostPath: {path: /}}]
`

// TestTenantPodsMeetTheLocationsPodSecurity: a tenant whose namespace runs
// on a shared physical cluster cannot run privileged containers or mount
// the node's file system there, unless the location's admins allow it
// (SyncTarget spec.podSecurity, baseline by default). kcp refuses such pods
// and pod templates with upstream's reasons; the downstream namespace
// carries the PodSecurity labels, so the physical cluster refuses such
// pods too, whatever path the template took there (created before the
// namespace was placed; the tenant's own namespace labels change nothing).
func TestTenantPodsMeetTheLocationsPodSecurity(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, team = "root:compute", "root:psa"
	s.CreateWorkspaces(compute, team)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	down := downClient(t, pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: apps}
spec: {locationWorkspace: "root:compute", namespaceSelector: {matchLabels: {run: "yes"}}}
`))
	s.Kubectl(team, "create", "namespace", "apps")
	s.Kubectl(team, "create", "namespace", "later")
	s.Kubectl(team, "label", "namespace", "apps", "run=yes")
	framework.Eventually(t, 60*time.Second, "namespace apps placed", func() (bool, string) {
		a := s.Kubectl(team, "get", "namespace", "apps", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
		return a == "root:compute/pc1", a
	})

	// kcp refuses, naming the target, its level and upstream's reasons.
	out, err := s.KubectlErr(team, privilegedPod, "-n", "apps", "create", "-f", "-")
	if err == nil || !strings.Contains(out, `runs on SyncTarget root:compute/pc1, which accepts only pods of the "baseline" Pod Security Standard`) ||
		!strings.Contains(out, "privileged") {
		t.Errorf("a privileged pod: %v\n%s", err, out)
	}
	out, err = s.KubectlErr(team, hostPathDeployment, "-n", "apps", "create", "-f", "-")
	if err == nil || !strings.Contains(out, "hostPath") {
		t.Errorf("a deployment mounting the node's file system: %v\n%s", err, out)
	}
	// An ordinary application is accepted and runs.
	s.Kubectl(team, "-n", "apps", "create", "deployment", "web", "--image=nginx")
	ctx := context.Background()
	nsApps := syncer.DownstreamNamespace(logicalcluster.Name(team), "apps")
	framework.Eventually(t, 60*time.Second, "web downstream", func() (bool, string) {
		_, err := down.AppsV1().Deployments(nsApps).Get(ctx, "web", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	ns, err := down.CoreV1().Namespaces().Get(ctx, nsApps, metav1.GetOptions{})
	if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "baseline" {
		t.Fatalf("the downstream namespace's pod security labels: %v %v", ns.GetLabels(), err)
	}

	// A template that took another path: created while its namespace ran
	// nowhere (accepted, waiting), then placed. The physical cluster's own
	// admission refuses its pods; the tenant's label on its namespace does
	// not lift the level downstream.
	s.KubectlErr(team, hostPathDeployment, "-n", "later", "create", "-f", "-")
	s.Kubectl(team, "label", "namespace", "later", "run=yes", "pod-security.kubernetes.io/enforce=privileged")
	nsLater := syncer.DownstreamNamespace(logicalcluster.Name(team), "later")
	framework.Eventually(t, 90*time.Second, "node-reader downstream, its ReplicaSet refused pods", func() (bool, string) {
		rs, err := down.AppsV1().ReplicaSets(nsLater).List(ctx, metav1.ListOptions{})
		if err != nil || len(rs.Items) == 0 {
			return false, fmt.Sprint("no replicaset yet ", err)
		}
		for _, c := range rs.Items[0].Status.Conditions {
			if c.Type == "ReplicaFailure" && strings.Contains(c.Message, "violates PodSecurity") {
				return true, c.Message
			}
		}
		return false, fmt.Sprint(rs.Items[0].Status)
	})
	if pods, _ := down.CoreV1().Pods(nsLater).List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("pods mounting the node's file system run downstream: %d", len(pods.Items))
	}
	if ns, _ := down.CoreV1().Namespaces().Get(ctx, nsLater, metav1.GetOptions{}); ns.Labels["pod-security.kubernetes.io/enforce"] != "baseline" {
		t.Errorf("the tenant's namespace label reached the physical cluster: %v", ns.Labels)
	}

	// A value the location cannot mean is refused.
	if out, err := s.KubectlErr(compute, "", "patch", "synctarget", "pc1", "--type=merge", "-p", `{"spec":{"podSecurity":"anything"}}`); err == nil {
		t.Errorf("spec.podSecurity anything accepted: %s", out)
	}
	// The location's admins allow privileged pods: the downstream namespaces
	// are relabelled and kcp accepts the pod.
	s.Kubectl(compute, "patch", "synctarget", "pc1", "--type=merge", "-p", `{"spec":{"podSecurity":"privileged"}}`)
	framework.Eventually(t, 60*time.Second, "downstream namespace relabelled privileged", func() (bool, string) {
		ns, err := down.CoreV1().Namespaces().Get(ctx, nsApps, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ns.Labels["pod-security.kubernetes.io/enforce"] == "privileged", fmt.Sprint(ns.Labels)
	})
	framework.Eventually(t, 30*time.Second, "the privileged pod accepted", func() (bool, string) {
		out, err := s.KubectlErr(team, privilegedPod, "-n", "apps", "create", "-f", "-")
		return err == nil, out
	})
	framework.Eventually(t, 60*time.Second, "the privileged pod downstream", func() (bool, string) {
		_, err := down.CoreV1().Pods(nsApps).Get(ctx, "root-shell", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}
