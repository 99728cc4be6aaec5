package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/server/memlimit"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// limitedCgroup creates a memory cgroup below the test's own with a limit
// of limit bytes and returns the command prefix that starts a process in
// it. It skips (loudly) where this process may not create cgroups.
func limitedCgroup(t *testing.T, limit int64) []string {
	t.Helper()
	dir, file, ok, err := memlimit.Cgroup(os.DirFS("/"))
	if err != nil || !ok {
		t.Skipf("SKIPPED: no memory cgroup to start kcp in (%v); the limit's parsing is covered by server/memlimit's unit tests", err)
	}
	child := filepath.Join(dir, fmt.Sprintf("kcp-e2e-%d", os.Getpid()))
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Skipf("SKIPPED: cannot create a memory cgroup here (%v); the limit's parsing is covered by server/memlimit's unit tests", err)
	}
	t.Cleanup(func() { os.Remove(child) })
	if err := os.WriteFile(filepath.Join(child, file), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		t.Skipf("SKIPPED: cannot set a memory limit on cgroup %s (%v)", child, err)
	}
	return []string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(child, "cgroup.procs")}
}

// gomemlimit is the Go runtime's soft memory limit as kcp's /metrics shows it.
func gomemlimit(t *testing.T, s *framework.Server) string {
	t.Helper()
	for _, line := range strings.Split(s.Kubectl("root", "get", "--raw", "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, "go_gc_gomemlimit_bytes "); ok {
			return v
		}
	}
	t.Fatal("/metrics has no go_gc_gomemlimit_bytes")
	return ""
}

// TestMemoryLimitFromTheContainer: kcp started in a container (cgroup)
// with a memory limit sets the Go runtime's soft limit to 0.9 of it, says
// so in its log, and serves; --memory-limit-ratio changes the share, 0
// turns it off, GOMEMLIMIT wins over it, and a ratio out of range is
// refused with a clear message.
func TestMemoryLimitFromTheContainer(t *testing.T) {
	const limit = 3 << 30
	prefix := limitedCgroup(t, limit)
	s := framework.StartServerWrapped(t, "", prefix)
	framework.MustContain(t, "kcp's log", s.LogTail(400), `"Go soft memory limit" limitMiB=2764 from="0.9 of the cgroup memory limit 3221225472 in `)
	if got := gomemlimit(t, s); got != "2.899102924e+09" {
		t.Errorf("go_gc_gomemlimit_bytes = %s, want 0.9 of 3 GiB (2.899102924e+09)", got)
	}
	s.CreateWorkspaces("root:team-a")
	framework.MustContain(t, "namespaces in a workspace", s.Kubectl("root:team-a", "get", "namespaces"), "default")

	s.Stop()
	s.Args = []string{"--memory-limit-ratio=0.5"}
	s.Start()
	if got := gomemlimit(t, s); got != "1.610612736e+09" {
		t.Errorf("with --memory-limit-ratio=0.5: go_gc_gomemlimit_bytes = %s, want 1.610612736e+09", got)
	}

	s.Stop()
	s.Args = []string{"--memory-limit-ratio=0"}
	s.Start()
	if got := gomemlimit(t, s); got != "9.223372036854776e+18" {
		t.Errorf("with --memory-limit-ratio=0: go_gc_gomemlimit_bytes = %s, want none (math.MaxInt64)", got)
	}
	framework.MustContain(t, "kcp's log", s.LogTail(400), `"no Go soft memory limit" because="--memory-limit-ratio=0"`)

	s.Stop()
	s.Args = nil
	s.Prefix = append([]string{"env", "GOMEMLIMIT=1GiB"}, prefix...)
	s.Start()
	if got := gomemlimit(t, s); got != "1.073741824e+09" {
		t.Errorf("with GOMEMLIMIT=1GiB: go_gc_gomemlimit_bytes = %s, want 1.073741824e+09", got)
	}
	framework.MustContain(t, "kcp's log", s.LogTail(400), `"Go soft memory limit" limitMiB=1024 from="GOMEMLIMIT=1GiB"`)

	kcp, _ := framework.Binaries(t)
	for _, bad := range []string{"1.5", "-0.1", "NaN"} {
		out, err := exec.Command(kcp, "start", "--root-dir", t.TempDir(), "--memory-limit-ratio="+bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--memory-limit-ratio must be between 0 (off) and 1, not "+bad) {
			t.Errorf("kcp start --memory-limit-ratio=%s: %v\n%s", bad, err, out)
		}
	}
}
