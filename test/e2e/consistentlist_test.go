package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestConsistentListsWhileAnotherTenantWrites: while one workspace writes
// secrets without pause, another creates config maps and lists them. The
// lists of a resource nobody else writes are read from the datastore when
// the watch cache has not caught up (kcp_consistent_lists_from_datastore_total
// grows), and every list still shows every config map created before it,
// and a watch from each list's resourceVersion sees the next create: a
// list answered from a cache that is behind would miss the new object, and
// one answered at a revision the cache never reached would make the watch
// fail or miss it.
func TestConsistentListsWhileAnotherTenantWrites(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		const writer, reader = "root:cl-writer", "root:cl-reader"
		s.CreateWorkspaces(writer, reader)
		ctx := context.Background()
		w, r := s.Client(writer), s.Client(reader)
		before := metricValue(t, s, `kcp_consistent_lists_from_datastore_total{resource="configmaps"}`)

		writes, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range 4 {
			name := fmt.Sprintf("s-%d", i)
			if _, err := w.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; writes.Err() == nil; n++ {
					w.CoreV1().Secrets("default").Update(writes, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
						StringData: map[string]string{"n": fmt.Sprint(n)}}, metav1.UpdateOptions{})
				}
			}()
		}
		defer func() { stop(); wg.Wait() }()
		time.Sleep(500 * time.Millisecond)

		cms := r.CoreV1().ConfigMaps("default")
		for i := range 30 {
			name := fmt.Sprintf("cm-%d", i)
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			l, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, cm := range l.Items {
				seen[cm.Name] = true
			}
			for j := 0; j <= i; j++ {
				if !seen[fmt.Sprintf("cm-%d", j)] {
					t.Fatalf("list %d (resourceVersion %s) misses cm-%d, created before it", i, l.ResourceVersion, j)
				}
			}
			if i%10 == 0 {
				watchFromList(t, cms, l.ResourceVersion, fmt.Sprintf("next-%d", i))
			}
		}
		if after := metricValue(t, s, `kcp_consistent_lists_from_datastore_total{resource="configmaps"}`); after <= before {
			t.Errorf("no config map list was read from the datastore (%v before, %v after) while another resource was written without pause", before, after)
		}
	})
}

// watchFromList watches from rv, creates name and expects its ADDED event
// first.
func watchFromList(t *testing.T, cms interface {
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
}, rv, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wi, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatalf("watch from the list's resourceVersion %s: %v", rv, err)
	}
	defer wi.Stop()
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-wi.ResultChan():
		cm, isCM := ev.Object.(*corev1.ConfigMap)
		if !ok || ev.Type != watch.Added || !isCM || cm.Name != name {
			t.Fatalf("watch from the list's resourceVersion %s: first event %s %v, want ADDED %s", rv, ev.Type, ev.Object, name)
		}
	case <-ctx.Done():
		t.Fatalf("watch from the list's resourceVersion %s: no event for %s", rv, name)
	}
}

// metricValue reads one sample (name with labels, as /metrics prints it).
func metricValue(t *testing.T, s *framework.Server, sample string) float64 {
	t.Helper()
	for _, line := range metricLines(t, s) {
		if strings.HasPrefix(line, sample+" ") {
			var n float64
			fmt.Sscan(strings.Fields(line)[1], &n)
			return n
		}
	}
	return 0
}

// metricLines reads the server's /metrics, one line each.
func metricLines(t *testing.T, s *framework.Server) []string {
	t.Helper()
	body, err := s.Client("root").CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(body), "\n")
}
