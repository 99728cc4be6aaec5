package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestConcurrentWritesNeedNoRetry: with no fault at all, writers that do
// not retry get no error: 8 clients create config maps while 4 more delete
// and re-create one name each, over and over, and every request answers
// 2xx, on both dialects. Each create-after-delete is the case the CI run of
// 2026-11-26 failed on (kubectl's re-create of a deleted service account
// answered "already exists"): on SQLite, connections sharing one page cache
// failed a write with "database table is locked" whenever another
// connection had a read open on the table (kine's poller, a cache fill,
// the read that confirms a write), which kine's create reported as
// AlreadyExists and the API server as 409, or as 503 when the client was
// lucky. Nothing is retried here (MaxRetries 0), so a 503 counts too.
func TestConcurrentWritesNeedNoRetry(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		cs := fastClient(t, s)
		ns := faultsNamespace(t, cs)
		w := runWriters(t, cs, ns, 8, 256)
		cycles := recreateLoops(t, cs, ns, 4, 15*time.Second)
		verifyAcked(t, cs, ns, w)
		if n := sum(w.errors); n > 0 {
			t.Errorf("%d creates without a fault failed (by status %v); every one should have answered 201", n, w.errors)
		}
		if cycles.failed > 0 {
			t.Errorf("%d of %d delete/re-create steps failed without a fault, e.g. %s", cycles.failed, cycles.done, cycles.first)
		}
		if cycles.done < 20 {
			t.Errorf("only %d delete/re-create steps ran: the test measured too little", cycles.done)
		}
		if b, err := os.ReadFile(s.LogFile); err == nil && strings.Contains(string(b), "table is locked") {
			t.Errorf("the server log shows a write or read refused for a lock")
		}
		if t.Failed() {
			t.Logf("datastore errors in the server log:\n%s", grepLog(s, "datastore", "not stored", "locked"))
		}
	})
}

// recreateResult counts the steps of recreateLoops.
type recreateResult struct {
	done, failed int
	first        string
}

// recreateLoops runs n clients for d, each creating, deleting and
// re-creating its own config map, without retries.
func recreateLoops(t *testing.T, cs *kubernetes.Clientset, ns string, n int, d time.Duration) recreateResult {
	t.Helper()
	var mu sync.Mutex
	var r recreateResult
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("again-%d", i)
			step := func(what string, err error) {
				mu.Lock()
				defer mu.Unlock()
				r.done++
				if err != nil {
					r.failed++
					if r.first == "" {
						r.first = fmt.Sprintf("%s %s: %v", what, name, err)
					}
				}
			}
			for time.Now().Before(deadline) {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": fmt.Sprint(i)}}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("configmaps").Body(cm).MaxRetries(0).Do(ctx).Error()
				step("create", err)
				if err == nil {
					err = cs.CoreV1().RESTClient().Delete().Namespace(ns).Resource("configmaps").Name(name).MaxRetries(0).Do(ctx).Error()
					step("delete", err)
				}
				cancel()
				if err != nil {
					// Start again from a known state.
					_ = cs.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
				}
			}
		}(i)
	}
	wg.Wait()
	return r
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// grepLog returns the server log's lines holding any of words (at most 40).
func grepLog(s *framework.Server, words ...string) string {
	b, _ := os.ReadFile(s.LogFile)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out[:min(len(out), 40)], "\n")
}
