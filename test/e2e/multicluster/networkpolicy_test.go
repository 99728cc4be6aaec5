package multicluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// policyApp labels its namespaces by team and admits traffic by those
// labels, as it would on its own cluster; its DNS rule selects kube-dns in
// any namespace ({}).
const policyApp = `apiVersion: v1
kind: Namespace
metadata: {name: web, labels: {team: web}}
---
apiVersion: v1
kind: Namespace
metadata: {name: db}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db, namespace: db}
spec:
  podSelector: {}
  ingress: [{from: [{namespaceSelector: {matchLabels: {team: web}}}]}]
  egress: [{to: [{namespaceSelector: {}, podSelector: {matchLabels: {k8s-app: kube-dns}}}]}]
`

// TestNetworkPolicyNamespaceSelectorsStayInTheirWorkspace: two workspaces
// on one physical cluster, with namespaces of the same names and labels. A
// NetworkPolicy's namespaceSelector means namespaces of its own workspace
// there, as on one's own cluster: a label selector admits the workspace's
// namespaces with that label and never another tenant's, {} means the
// workspace's namespaces (and kube-system, for DNS), and a label taken off
// the workspace's namespace is taken off downstream. The selectors are
// evaluated by the physical cluster's API server (what its network plugin
// would enforce).
func TestNetworkPolicyNamespaceSelectorsStayInTheirWorkspace(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "")
	const compute, teamA, teamB = "root:compute", "root:np-a", "root:np-b"
	s.CreateWorkspaces(compute, teamA, teamB)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	down := downClient(t, pcs["pc1"])
	for _, ws := range []string{teamA, teamB} {
		placeAll(t, s, ws, compute, "pc1")
		s.Kubectl(ws, "apply", "-f", framework.WriteFile(t, "app.yaml", policyApp))
	}
	dn := func(ws, ns string) string { return syncer.DownstreamNamespace(logicalcluster.Name(ws), ns) }
	ctx := context.Background()

	var np *networkingv1.NetworkPolicy
	framework.Eventually(t, 60*time.Second, "team A's NetworkPolicy downstream", func() (bool, string) {
		var err error
		np, err = down.NetworkingV1().NetworkPolicies(dn(teamA, "db")).Get(ctx, "db", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	// Both workspaces' namespaces exist downstream with their labels.
	framework.Eventually(t, 60*time.Second, "the namespaces downstream with their labels", func() (bool, string) {
		for _, ws := range []string{teamA, teamB} {
			ns, err := down.CoreV1().Namespaces().Get(ctx, dn(ws, "web"), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if ns.Labels[syncer.NamespaceLabelKey("team")] != "web" || ns.Labels[syncer.WorkspaceLabel] == "" {
				return false, ws + ": " + labelsString(ns.Labels)
			}
			if _, ok := ns.Labels["team"]; ok {
				t.Errorf("the tenant's label team reached the physical cluster under its own key: %v", ns.Labels)
			}
		}
		return true, ""
	})

	// {} selects every namespace team A runs here, and kube-system.
	all, err := down.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	egress := []string{"kube-system"}
	for _, ns := range all.Items {
		if ns.Annotations[syncer.UpstreamClusterAnnotation] == teamA {
			egress = append(egress, ns.Name)
		}
	}
	want := map[string][]string{
		"ingress": {dn(teamA, "web")},
		"egress":  sorted(egress...),
	}
	got := map[string][]string{
		"ingress": selectedBy(t, down, np.Spec.Ingress[0].From),
		"egress":  selectedBy(t, down, np.Spec.Egress[0].To),
	}
	for dir := range want {
		if strings.Join(got[dir], ",") != strings.Join(want[dir], ",") {
			t.Errorf("the %s rule's namespace selectors select %v on the physical cluster, want %v (team B's namespaces: %s, %s)",
				dir, got[dir], want[dir], dn(teamB, "web"), dn(teamB, "db"))
		}
	}
	for _, p := range np.Spec.Egress[0].To {
		if p.PodSelector == nil || p.PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
			t.Errorf("an egress peer lost its podSelector: %+v", p)
		}
	}

	// Team A takes the label off: its web namespace no longer matches.
	s.Kubectl(teamA, "label", "namespace", "web", "team-")
	framework.Eventually(t, 60*time.Second, "the label to go downstream", func() (bool, string) {
		sel := selectedBy(t, down, np.Spec.Ingress[0].From)
		return len(sel) == 0, strings.Join(sel, ",")
	})
}

// selectedBy lists the namespaces of a physical cluster that the peers'
// namespaceSelectors select, by the cluster's own label selection.
func selectedBy(t *testing.T, down *kubernetes.Clientset, peers []networkingv1.NetworkPolicyPeer) []string {
	t.Helper()
	set := map[string]bool{}
	for _, p := range peers {
		if p.NamespaceSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
		if err != nil {
			t.Fatalf("a peer's namespaceSelector downstream: %v", err)
		}
		list, err := down.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range list.Items {
			set[ns.Name] = true
		}
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sorted(s ...string) []string { sort.Strings(s); return s }

func labelsString(l map[string]string) string {
	var out []string
	for k, v := range l {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
