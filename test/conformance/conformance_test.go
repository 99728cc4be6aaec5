// Package conformance runs the upstream Kubernetes e2e specs listed in
// ../shared/conformance (and our own lists here) against non-root logical
// clusters of a real kcp, and the CRD specs against APIs a workspace binds
// (boundcrds_test.go). It runs with `make conformance` (KCP_CONFORMANCE=1):
// it needs e2e.test, built once by ../shared/conformance/build.sh.
package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

func shared(t *testing.T) string {
	dir := filepath.Join(framework.RepoRoot(), "..", "shared", "conformance")
	if _, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil {
		t.Fatalf("../shared/conformance/run.sh not found next to the repository: %v", err)
	}
	return dir
}

// kubeconfigFor writes a kubeconfig whose server is one logical cluster.
func kubeconfigFor(t *testing.T, s *framework.Server, cluster string) string {
	cfg, err := clientcmd.LoadFromFile(s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = s.URL() + "/clusters/" + cluster
	}
	p := filepath.Join(s.RootDir, strings.ReplaceAll(cluster, ":", "_")+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// specLists are the lists to run: KCP_CONFORMANCE_SPECS (comma-separated
// paths) or the shared core and CRD lists plus ours (service accounts and
// garbage collection).
func specLists(t *testing.T) []string {
	if v := os.Getenv("KCP_CONFORMANCE_SPECS"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{filepath.Join(shared(t), "specs-core.txt"), filepath.Join(shared(t), "specs-crd.txt"),
		filepath.Join(framework.RepoRoot(), "test", "conformance", "specs-tenancy.txt"),
		filepath.Join(framework.RepoRoot(), "test", "conformance", "specs-admission.txt")}
}

// buildConformance builds (once; build.sh caches) e2e.test and returns
// the shared directory and the binaries' directory.
func buildConformance(t *testing.T) (dir, bin string) {
	dir = shared(t)
	build := exec.Command(filepath.Join(dir, "build.sh"))
	build.Dir = framework.RepoRoot()
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		t.Fatalf("build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return dir, lines[len(lines)-1]
}

const placeEverything = `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: conformance}
spec:
  locationWorkspace: root:conformance-compute
  namespaceSelector: {}
`

// TestConformance runs each list in two logical clusters at the same time.
func TestConformance(t *testing.T) {
	if os.Getenv("KCP_CONFORMANCE") != "1" {
		t.Skip("conformance runs with `make conformance` (KCP_CONFORMANCE=1)")
	}
	dir, bin := buildConformance(t)

	s := framework.StartServer(t, "")
	clusters := []string{"root:conformance-a", "root:conformance-b"}
	if os.Getenv("KCP_CONFORMANCE_SINGLE") == "1" {
		clusters = clusters[:1]
	}
	s.CreateWorkspaces(clusters...)
	// Deployments are accepted in namespaces a Placement selects (kcp runs
	// them on physical clusters, docs/multicluster.md); the specs create
	// some in namespaces of their own, so every namespace is selected. No
	// physical cluster is needed for the API's behaviour the specs check.
	s.CreateWorkspaces("root:conformance-compute")
	for _, c := range clusters {
		if out, err := s.KubectlErr(c, placeEverything, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	for _, specs := range specLists(t) {
		var wg sync.WaitGroup
		results := make([]string, len(clusters))
		errs := make([]error, len(clusters))
		for i, c := range clusters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(filepath.Join(dir, "run.sh"), kubeconfigFor(t, s, c), specs)
				cmd.Env = append(os.Environ(), "BIN="+bin, "OUTDIR="+filepath.Join(s.RootDir, "conformance-"+strings.ReplaceAll(c, ":", "_")+"-"+filepath.Base(specs)))
				o, err := cmd.CombinedOutput()
				results[i], errs[i] = string(o), err
			}()
		}
		wg.Wait()
		for i, c := range clusters {
			fmt.Printf("=== %s in %s\n%s\n", filepath.Base(specs), c, results[i])
			if errs[i] != nil {
				t.Errorf("%s in %s: %v", filepath.Base(specs), c, errs[i])
			}
		}
	}
}
