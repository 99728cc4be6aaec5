package crds

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestCRDServerSideApplyHasConditions (issue 50 item 1): CRDs installed
// with kubectl apply --server-side (what big CRDs, Argo CD, Flux and helm
// --server-side use) are created on the update path; they must be stored
// with their conditions like a POST create, so that kubectl wait
// --for=condition=Established right after never finds no conditions. Under
// write load in another workspace, on both dialects.
func TestCRDServerSideApplyHasConditions(t *testing.T) {
	for _, d := range []framework.Dialect{framework.SQLite, framework.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			s.CreateWorkspaces("root:busy", "root:install")
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			busy := s.Client("root:busy")
			for w := 0; w < 6; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ctx.Err() == nil; i++ {
						cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d-%d", w, i)}}
						busy.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
					}
				}()
			}
			defer func() { stop(); wg.Wait() }()
			crd := func(i int) string {
				return framework.NamespacedCRD("ssa.example.com", fmt.Sprintf("widgets%d", i), fmt.Sprintf("Widget%d", i), "{type: object, x-kubernetes-preserve-unknown-fields: true}")
			}
			// The object the server-side apply stores already has them.
			out, err := s.KubectlErr("root:install", crd(0), "apply", "--server-side", "-f", "-", "-o", "jsonpath={.status.conditions[*].type}")
			if err != nil || !strings.Contains(out, "Established") {
				t.Fatalf("the answer to a server-side apply that creates a CRD has no Established condition: %v\n%s", err, out)
			}
			// Ten at once, then wait at once.
			var all []string
			var names []string
			for i := 1; i <= 10; i++ {
				all = append(all, crd(i))
				names = append(names, fmt.Sprintf("crd/widgets%d.ssa.example.com", i))
			}
			if out, err := s.KubectlErr("root:install", strings.Join(all, "\n---\n"), "apply", "--server-side", "-f", "-"); err != nil {
				t.Fatalf("kubectl apply --server-side of ten CRDs: %v\n%s", err, out)
			}
			args := append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, names...)
			if out, err := s.KubectlErr("root:install", "", args...); err != nil {
				t.Fatalf("kubectl wait --for=condition=Established right after the server-side apply: %v\n%s", err, out)
			}
		})
	}
}
