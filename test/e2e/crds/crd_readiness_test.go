package crds

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestCRDReadyWhenEstablished installs CRDs as a user's script does, on a
// server under write load and again after a restart: kubectl apply, kubectl
// wait --for=condition=Established, then at once a custom resource and
// kubectl explain (OpenAPI v3). Each step must succeed the first time: a new
// CRD has conditions from its first version, and Established comes only
// once the resource, its discovery and its OpenAPI are served.
func TestCRDReadyWhenEstablished(t *testing.T) {
	for _, d := range []framework.Dialect{framework.SQLite, framework.Postgres} {
		t.Run(string(d), func(t *testing.T) { testCRDReadyWhenEstablished(t, framework.DatastoreFor(t, d)) })
	}
}

func testCRDReadyWhenEstablished(t *testing.T, datastore string) {
	s := framework.StartServer(t, datastore)
	s.CreateWorkspaces("root:busy", "root:install")

	// Load: writers in another workspace for the whole first round.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var written atomic.Int64
	busy := s.Client("root:busy")
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d-%d", w, i)}, Data: map[string]string{"k": strings.Repeat("x", 512)}}
				if _, err := busy.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err == nil {
					written.Add(1)
				}
			}
		}()
	}
	install := func(cluster string, i int) {
		t.Helper()
		plural, kind := fmt.Sprintf("gizmos%d", i), fmt.Sprintf("Gizmo%d", i)
		crd := framework.NamespacedCRD("ready.example.com", plural, kind,
			"{type: object, properties: {spec: {type: object, properties: {size: {type: integer, description: the size of the gizmo}}}}}")
		// The object the create answers already has conditions.
		out, err := s.KubectlErr(cluster, crd, "create", "-f", "-", "-o", "jsonpath={.status.conditions[*].type}")
		if err != nil {
			t.Fatalf("creating CRD %s: %v\n%s", plural, err, out)
		}
		framework.MustContain(t, "conditions in the create answer", out, "Established")
		s.WaitEstablished(cluster, "crd/"+plural+".ready.example.com")
		cr := fmt.Sprintf("apiVersion: ready.example.com/v1\nkind: %s\nmetadata: {name: g, namespace: default}\nspec: {size: 3}\n", kind)
		if out, err := s.KubectlErr(cluster, cr, "apply", "-f", "-"); err != nil {
			t.Fatalf("applying a %s right after Established: %v\n%s", kind, err, out)
		}
		// The schema is in force: a string where an integer belongs is refused.
		bad := strings.Replace(cr, "size: 3", "size: big", 1)
		if out, err := s.KubectlErr(cluster, bad, "apply", "-f", "-"); err == nil || !strings.Contains(out, "spec.size") {
			t.Fatalf("a %s with size: big was not refused for spec.size: %v\n%s", kind, err, out)
		}
		out, err = s.KubectlErr(cluster, "", "explain", plural+".spec.size")
		if err != nil || !strings.Contains(out, "the size of the gizmo") {
			t.Fatalf("kubectl explain %s.spec.size right after Established: %v\n%s", plural, err, out)
		}
	}
	for i := 0; i < 8; i++ {
		install("root:install", i)
	}
	stop()
	wg.Wait()
	if written.Load() == 0 {
		t.Fatal("the load writers wrote nothing: the test ran without load")
	}
	t.Logf("%d configmaps written by the load meanwhile", written.Load())

	// After a restart the serving caches start empty.
	s.Stop()
	s.Start()
	for i := 8; i < 11; i++ {
		install("root:install", i)
	}
}
