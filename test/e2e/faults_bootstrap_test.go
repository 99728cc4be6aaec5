package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// workspaceCreators creates workspaces in root from n writers until stop is
// called, recording which creates were acknowledged and how the others
// answered.
type workspaceCreators struct {
	mu    sync.Mutex
	acked []string
	codes map[int]int
	stop  func()
}

func createWorkspacesUntilStopped(t *testing.T, cs *kubernetes.Clientset, n int) *workspaceCreators {
	t.Helper()
	w := &workspaceCreators{codes: map[int]int{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-done:
					return
				default:
				}
				name := fmt.Sprintf("boot-%d-%04d", i, j)
				ws := &unstructured.Unstructured{Object: map[string]interface{}{
					"apiVersion": tenancy.Group + "/" + tenancy.Version, "kind": "Workspace", "metadata": map[string]interface{}{"name": name}}}
				body, err := ws.MarshalJSON()
				if err != nil {
					panic(err)
				}
				// Not retried by the client (a 503 carries Retry-After), so
				// each answer is the server's answer to that one request.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err = cs.CoreV1().RESTClient().Post().AbsPath("/apis", tenancy.Group, tenancy.Version, "workspaces").
					Body(body).SetHeader("Content-Type", "application/json").MaxRetries(0).Do(ctx).Error()
				cancel()
				w.mu.Lock()
				if err == nil {
					w.acked = append(w.acked, name)
				} else if st, ok := err.(apierrors.APIStatus); ok {
					w.codes[int(st.Status().Code)]++
				} else {
					w.codes[0]++
				}
				w.mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	var once sync.Once
	w.stop = func() { once.Do(func() { close(done) }); wg.Wait() }
	t.Cleanup(w.stop)
	return w
}

// TestFaultWorkspaceBootstrapSQLite: a new workspace's LogicalCluster, its
// namespaces and its Ready status are written by the workspace controller
// through the storage layer, not by API requests. Workspaces are created
// while the disk fills up and while kcp is killed with SIGKILL; afterwards
// every acknowledged workspace, and every workspace that was stored at
// all, becomes Ready with its default namespaces and their defaults.
// Nothing answers 500 while the disk is full.
func TestFaultWorkspaceBootstrapSQLite(t *testing.T) {
	for _, fault := range []string{"disk full", "kill -9"} {
		t.Run(strings.ReplaceAll(fault, " ", "-"), func(t *testing.T) {
			s := framework.StartServer(t, "")
			cfg := s.Config("root")
			cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, 30*time.Second
			root, err := dynamic.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cs := fastClient(t, s)
			w := createWorkspacesUntilStopped(t, cs, 4)
			// Some creates acknowledged before the fault, however slow the
			// machine (on a loaded one 2 s were once not enough for any).
			framework.Eventually(t, 60*time.Second, "a first workspace create to be acknowledged", func() (bool, string) {
				w.mu.Lock()
				defer w.mu.Unlock()
				return len(w.acked) > 0, fmt.Sprintf("failures by code %v", w.codes)
			})
			time.Sleep(2 * time.Second)
			switch fault {
			case "disk full":
				fillDisk(t, s, cs, 1<<20)
				framework.Eventually(t, 60*time.Second, "workspace creates to be refused while the disk is full", func() (bool, string) {
					w.mu.Lock()
					defer w.mu.Unlock()
					return w.codes[503] > 0, fmt.Sprintf("%d acknowledged, failures by code %v", len(w.acked), w.codes)
				})
				time.Sleep(3 * time.Second)
				freeDisk(t, s)
				time.Sleep(2 * time.Second)
				w.stop()
			case "kill -9":
				s.Kill()
				w.stop()
				s.Start()
			}
			w.mu.Lock()
			acked, codes := append([]string(nil), w.acked...), w.codes
			w.mu.Unlock()
			t.Logf("acknowledged workspaces: %d; failures by code: %v", len(acked), codes)
			if len(acked) == 0 {
				t.Fatal("no workspace was acknowledged: the test measured nothing")
			}
			if fault == "disk full" {
				if codes[500] > 0 {
					t.Errorf("%d creates answered 500; a datastore that cannot write must answer 503", codes[500])
				}
				if codes[503] == 0 {
					t.Errorf("no create answered 503 while the disk was full: the fault was not injected")
				}
			}
			var list *unstructured.UnstructuredList
			framework.Eventually(t, 60*time.Second, "listing the workspaces after the fault", func() (bool, string) {
				list, err = root.Resource(tenancy.WorkspacesResource).List(context.Background(), metav1.ListOptions{})
				if err != nil {
					return false, err.Error()
				}
				return true, ""
			})
			stored := map[string]bool{}
			for _, ws := range list.Items {
				stored[ws.GetName()] = true
			}
			for _, name := range acked {
				if !stored[name] {
					t.Errorf("workspace %s was acknowledged but is not stored", name)
				}
			}
			t.Logf("stored workspaces: %d", len(stored))
			for name := range stored {
				waitWorkspaceWithDefaults(t, s, root, name)
			}
		})
	}
}
