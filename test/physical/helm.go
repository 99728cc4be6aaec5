package physical

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// HelmVersion is the helm CLI tests install charts with, as a user would.
const HelmVersion = "v3.22.0"

// HelmDir is where the helm CLI is kept: once per machine and version.
func HelmDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "kcp-bench", "helm-"+HelmVersion)
}

// EnsureHelm builds the helm CLI from the Go module proxy once per machine,
// with its own module (helm is no dependency of ours: go install of a
// version builds outside our go.mod), and returns its path.
func EnsureHelm(log func(string, ...any)) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	out := filepath.Join(HelmDir(), "helm")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(HelmDir(), 0o755); err != nil {
		return "", err
	}
	// Installed into a directory of its own and renamed: test binaries of
	// several packages may build it at once.
	tmp, err := os.MkdirTemp(HelmDir(), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	log("building helm %s from the Go module proxy into %s (minutes on a cold cache) ...", HelmVersion, HelmDir())
	start := time.Now()
	cmd := exec.Command("go", "install", "-ldflags", "-s -w", "helm.sh/helm/v3/cmd/helm@"+HelmVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building helm %s (go install helm.sh/helm/v3/cmd/helm@%s; needs the Go module proxy): %v\n%s", HelmVersion, HelmVersion, err, b)
	}
	log("built helm %s in %s", HelmVersion, time.Since(start).Round(time.Second))
	return out, os.Rename(filepath.Join(tmp, "helm"), out)
}
