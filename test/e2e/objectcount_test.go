package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestObjectCountsFromTheWatchCache: the number of objects the server
// reports per resource (apiserver_resource_objects; its deprecated twin
// apiserver_storage_objects is hidden in release builds of 1.37; priority
// and fairness charges lists of all clusters by the same count) follows creates and
// deletes in every cluster, served defaults included, and once the watch
// cache is filled it is taken from the cache: no COUNT of the resource's
// keys in the datastore, which upstream runs every minute per resource (at
// 100,000 workspaces, a quarter of an idle server's CPU).
func TestObjectCountsFromTheWatchCache(t *testing.T) {
	ctx := context.Background()
	s := framework.StartServer(t, "", "--object-count-period=1s")
	all := s.Client("*")
	// listed counts a resource's objects in all clusters, as a client sees them.
	listed := func(path string) int {
		t.Helper()
		raw, err := all.CoreV1().RESTClient().Get().Resource(path).DoRaw(ctx)
		if err != nil {
			t.Fatalf("list %s of all clusters: %v", path, err)
		}
		var l struct{ Items []json.RawMessage }
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	resources := []string{"namespaces", "serviceaccounts", "configmaps"}
	counted := func(phase string) {
		t.Helper()
		for _, r := range resources {
			framework.Eventually(t, time.Minute, phase+": apiserver_resource_objects of "+r, func() (bool, string) {
				want := listed(r)
				got := metricWith(t, s, "apiserver_resource_objects", `group=""`, `resource="`+r+`"`)
				return int(got) == want, fmt.Sprintf("metric %v, %d listed", got, want)
			})
		}
	}
	// datastoreCounts is how often the server has counted r in the datastore.
	datastoreCounts := func(r string) float64 {
		t.Helper()
		return metricWith(t, s, "etcd_requests_total", `operation="listWithCount"`, `group=""`, `resource="`+r+`"`)
	}
	counted("at start")
	before := map[string]float64{}
	for _, r := range resources {
		before[r] = datastoreCounts(r)
	}

	s.CreateWorkspaces("root:count-a", "root:count-b")
	a, b := s.Client("root:count-a"), s.Client("root:count-b")
	if _, err := a.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "extra"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CoreV1().ConfigMaps("extra").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	counted("after two workspaces, two namespaces and a config map")
	if err := b.CoreV1().Namespaces().Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.CoreV1().ServiceAccounts("extra").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "namespace gone of count-b deleted", func() (bool, string) {
		_, err := b.CoreV1().Namespaces().Get(ctx, "gone", metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
	counted("after deleting a namespace and a served default")
	// Counted every second for all of the above, never in the datastore.
	for _, r := range resources {
		if after := datastoreCounts(r); after != before[r] {
			t.Errorf("%s counted in the datastore %v times once the watch cache was filled", r, after-before[r])
		}
	}
}

// metricWith reads the first sample of metric name whose labels include
// every one of labels (each `name="value"`, in any order).
func metricWith(t *testing.T, s *framework.Server, name string, labels ...string) float64 {
	t.Helper()
next:
	for _, line := range metricLines(t, s) {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		var n float64
		fmt.Sscan(strings.Fields(line)[len(strings.Fields(line))-1], &n)
		return n
	}
	return 0
}
