package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestResourceQuota is issue 17's quota per logical cluster, on both
// dialects: a quota in workspace A limits configmaps and a custom resource
// in A's namespace, with status.used kept true, concurrent creates never
// getting past the limit, and a deletion freeing room; workspace B has the
// same namespace, the same CRD and the same names and is limited by
// nothing of A's.
func TestResourceQuota(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *framework.Server) {
		const a, b = "root:quota-a", "root:quota-b"
		s.CreateWorkspaces(a, b)
		for _, ws := range []string{a, b} {
			s.Kubectl(ws, "create", "namespace", "team")
			s.KubectlErr(ws, framework.WidgetsA, "apply", "-f", "-")
			s.WaitEstablished(ws, "crd/widgets.example.com")
		}
		ctx := context.Background()
		ca, cb := s.Client(a), s.Client(b)
		countConfigMaps := func(ws string) int {
			list, err := s.Client(ws).CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return len(list.Items)
		}
		// The namespace's kube-root-ca.crt is a configmap too: wait for it,
		// so the counts below are exact.
		framework.Eventually(t, 30*time.Second, "kube-root-ca.crt in team", func() (bool, string) {
			n := countConfigMaps(a)
			return n == 1, fmt.Sprint(n)
		})

		// Bad input is refused by validation and stores nothing.
		if out, err := s.KubectlErr(a, "", "create", "quota", "bad", "-n", "team", "--hard=count/configmaps=-1"); err == nil || !strings.Contains(out, "must be greater than or equal to 0") {
			t.Errorf("a negative quota: want a refusal, got %v\n%s", err, out)
		}

		s.Kubectl(a, "create", "quota", "q", "-n", "team", "--hard=count/configmaps=4,count/widgets.example.com=2,secrets=1")
		used := func(ws string) string {
			return s.Kubectl(ws, "get", "quota", "q", "-n", "team", "-o", `jsonpath={.status.used.count/configmaps} {.status.used.count/widgets\.example\.com} {.status.used.secrets}`)
		}
		framework.Eventually(t, 30*time.Second, "the quota's status counted", func() (bool, string) {
			u := used(a)
			return u == "1 0 0", u
		})

		// Concurrent creates in A: exactly the 3 that fit get through.
		var mu sync.Mutex
		var created, refused int
		var other []string
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := ca.CoreV1().ConfigMaps("team").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)}}, metav1.CreateOptions{})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created++
				case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota: q"):
					refused++
				default:
					other = append(other, err.Error())
				}
			}()
		}
		wg.Wait()
		if created != 3 || refused != 7 || len(other) > 0 || countConfigMaps(a) != 4 {
			t.Errorf("10 concurrent creates under count/configmaps=4 with 1 used: %d created, %d refused, other errors %v; %d configmaps now", created, refused, other, countConfigMaps(a))
		}
		out, err := s.KubectlErr(a, "", "create", "configmap", "one-more", "-n", "team")
		if err == nil || !strings.Contains(out, `exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=4, limited: count/configmaps=4`) {
			t.Errorf("a fifth configmap: want the quota's refusal, got %v\n%s", err, out)
		}

		// Custom resources and the legacy secrets count.
		for i := range 3 {
			out, err := s.KubectlErr(a, fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w%d, namespace: team}\nspec: {size: 1}\n", i), "apply", "-f", "-")
			if (i < 2) != (err == nil) {
				t.Errorf("widget %d under count/widgets.example.com=2: %v\n%s", i, err, out)
			}
		}
		s.Kubectl(a, "create", "secret", "generic", "s0", "-n", "team")
		if out, err := s.KubectlErr(a, "", "create", "secret", "generic", "s1", "-n", "team"); err == nil || !strings.Contains(out, "exceeded quota") {
			t.Errorf("a second secret under secrets=1: %v\n%s", err, out)
		}
		framework.Eventually(t, 30*time.Second, "status.used after the creates", func() (bool, string) {
			u := used(a)
			return u == "4 2 1", u
		})

		// B: same namespace, same names, no quota of its own; A's limits
		// nothing there.
		for i := range 6 {
			if _, err := cb.CoreV1().ConfigMaps("team").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)}}, metav1.CreateOptions{}); err != nil {
				t.Errorf("configmap c%d in B: %v", i, err)
			}
		}
		for i := range 3 {
			if out, err := s.KubectlErr(b, fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w%d, namespace: team}\nspec: {size: 1}\n", i), "apply", "-f", "-"); err != nil {
				t.Errorf("widget %d in B: %v\n%s", i, err, out)
			}
		}
		if out, err := s.KubectlErr(b, "", "get", "quota", "-n", "team", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("A's quota is visible in B: %v %q", err, out)
		}
		// B's own quota counts B's objects only.
		s.Kubectl(b, "create", "quota", "q", "-n", "team", "--hard=count/configmaps=100")
		framework.Eventually(t, 30*time.Second, "B's quota counts B's 7 configmaps", func() (bool, string) {
			u := s.Kubectl(b, "get", "quota", "q", "-n", "team", "-o", `jsonpath={.status.used.count/configmaps}`)
			return u == "7", u
		})

		// Deleting in A frees room: status.used goes down and a create fits.
		s.Kubectl(a, "delete", "configmap", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "-n", "team", "--ignore-not-found")
		framework.Eventually(t, 30*time.Second, "status.used down after the deletion", func() (bool, string) {
			u := used(a)
			return u == "1 2 1", u
		})
		if out, err := s.KubectlErr(a, "", "create", "configmap", "after-delete", "-n", "team"); err != nil {
			t.Errorf("a configmap after the deletion: %v\n%s", err, out)
		}

		// Raising the limit takes effect once the controller has copied it
		// to status.hard.
		s.Kubectl(a, "patch", "quota", "q", "-n", "team", "--type=merge", "-p", `{"spec":{"hard":{"count/widgets.example.com":"3"}}}`)
		framework.Eventually(t, 30*time.Second, "the raised limit", func() (bool, string) {
			out, err := s.KubectlErr(a, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: team}\nspec: {size: 1}\n", "apply", "-f", "-")
			return err == nil, out
		})
	})
}
