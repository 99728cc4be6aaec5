package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestGarbageCollectorLetsGoOfDeletedCRDs: the garbage collector watches
// every resource it discovers, custom ones of every workspace included. Once
// the workspaces that defined a custom resource are deleted, its watch must
// stop (issue 50 item 7: reflectors kept failing to list every second, 120-190
// log lines a minute, until a restart), and a CRD defining it again must be
// watched again. An operator sees it in kcp_garbage_collector_watched_resources
// and in the log.
func TestGarbageCollectorLetsGoOfDeletedCRDs(t *testing.T) {
	s := framework.StartServer(t, "", "--garbage-collector-discovery-period=2s")
	const sample = "kcp_garbage_collector_watched_resources"
	watched := func() float64 { return metricValue(t, s, sample) }

	// The baseline: built-in resources, steady over two discoveries.
	var base float64
	framework.Eventually(t, 60*time.Second, "the collector's watched resources to settle", func() (bool, string) {
		a := watched()
		time.Sleep(5 * time.Second)
		base = watched()
		return base > 0 && a == base, fmt.Sprintf("%s: %v then %v", sample, a, base)
	})

	groups := []string{"one.gcforget.example.com", "two.gcforget.example.com", "three.gcforget.example.com"}
	s.CreateWorkspaces("root:gcforget-a", "root:gcforget-b")
	for i, g := range groups {
		ws := "root:gcforget-a"
		if i == 2 {
			ws = "root:gcforget-b"
		}
		crd := framework.NamespacedCRD(g, "widgets", "Widget", "{type: object, x-kubernetes-preserve-unknown-fields: true}")
		if out, err := s.KubectlErr(ws, crd, "apply", "-f", "-"); err != nil {
			t.Fatalf("CRD %s in %s: %v\n%s", g, ws, err, out)
		}
		s.WaitEstablished(ws, "crd/widgets."+g)
		obj := fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata: {name: w, namespace: default}\nspec: {size: 1}\n", g)
		if out, err := s.KubectlErr(ws, obj, "apply", "-f", "-"); err != nil {
			t.Fatalf("widget of %s: %v\n%s", g, err, out)
		}
	}
	framework.Eventually(t, 60*time.Second, "the collector to watch the three custom resources", func() (bool, string) {
		n := watched()
		return n == base+3, fmt.Sprintf("%s = %v, want %v", sample, n, base+3)
	})

	// Both workspaces deleted: every watch of theirs goes.
	s.Kubectl("root", "delete", "workspace", "gcforget-a", "gcforget-b", "--wait=true", "--timeout=90s")
	framework.Eventually(t, 90*time.Second, "the collector to stop watching the deleted workspaces' custom resources", func() (bool, string) {
		n := watched()
		return n == base, fmt.Sprintf("%s = %v, want %v as before the CRDs", sample, n, base)
	})
	// And the log stays quiet about them: no reflector left failing to list.
	failing := func() int {
		n := 0
		for _, line := range strings.Split(s.LogTail(5000), "\n") {
			if strings.Contains(line, "gcforget.example.com") && (strings.Contains(line, "Failed to watch") || strings.Contains(line, "failed to list")) {
				n++
			}
		}
		return n
	}
	before := failing()
	time.Sleep(10 * time.Second)
	if after := failing(); after > before {
		t.Errorf("%d new log lines of reflectors failing on the deleted custom resources in 10 s:\n%s", after-before, s.LogTail(30))
	}

	// A CRD serving one of them again is watched again.
	s.CreateWorkspaces("root:gcforget-c")
	crd := framework.NamespacedCRD(groups[0], "widgets", "Widget", "{type: object, x-kubernetes-preserve-unknown-fields: true}")
	if out, err := s.KubectlErr("root:gcforget-c", crd, "apply", "-f", "-"); err != nil {
		t.Fatalf("CRD again: %v\n%s", err, out)
	}
	framework.Eventually(t, 60*time.Second, "the collector to watch the custom resource again", func() (bool, string) {
		n := watched()
		return n == base+1, fmt.Sprintf("%s = %v, want %v", sample, n, base+1)
	})
}
