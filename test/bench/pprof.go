package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

var (
	profileDir = flag.String("profile-dir", "", "write profiles here: a 30-second CPU profile of the server's start-up work at each per-tenant list step, the scale benchmark's start, idle minute (the last of -scale-rss-later) and creates, heap profiles before and after the flat workspaces, and -cpu-profile long CPU profiles of the flat workspace creation and of each server's create and update steps side by side")
	cpuProf    = flag.Duration("cpu-profile", 10*time.Second, "with -profile-dir: length of the CPU profiles taken from the start of a measured step (give the step enough work to last that long)")
)

// cpuProfile starts a -cpu-profile long CPU profile of the server behind c
// into -profile-dir/file, if -profile-dir is set, and returns a function to
// call when the measured step (what) ends: it waits for the profile.
func cpuProfile(c kubernetes.Interface, file, what string, log func(string, ...any)) (wait func()) {
	if *profileDir == "" {
		return func() {}
	}
	done := make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(done)
		writeProfileOf(c, file, log, "profile", "seconds", fmt.Sprint(int(cpuProf.Seconds())))
	}()
	return func() {
		if time.Since(t0) < *cpuProf {
			log("%s ended before its %s CPU profile: the profile includes idle time; give the step more work", what, *cpuProf)
		}
		<-done
	}
}

// pprof reads the server's /debug/pprof/<name> with the given parameters
// (name, value, name, value, ...).
func (s *server) pprof(name string, params ...string) ([]byte, error) {
	c, err := s.client("root")
	if err != nil {
		return nil, err
	}
	return pprofOf(c, name, params...)
}

// pprofOf reads /debug/pprof/<name> of any API server (kcp or upstream
// kube-apiserver, which serves it by default) through client c.
func pprofOf(c kubernetes.Interface, name string, params ...string) ([]byte, error) {
	req := c.Discovery().RESTClient().Get().AbsPath("/debug/pprof/" + name).Timeout(2 * time.Minute)
	for i := 0; i+1 < len(params); i += 2 {
		req = req.Param(params[i], params[i+1])
	}
	return req.DoRaw(context.Background())
}

// writeProfile writes the profile name into -profile-dir as file; nothing
// without -profile-dir.
func (s *server) writeProfile(file string, log func(string, ...any), name string, params ...string) {
	if *profileDir == "" {
		return // without building a client
	}
	c, err := s.client("root")
	if err != nil {
		log("profile %s: %v", file, err)
		return
	}
	writeProfileOf(c, file, log, name, params...)
}

// writeProfileOf is writeProfile for any API server.
func writeProfileOf(c kubernetes.Interface, file string, log func(string, ...any), name string, params ...string) {
	if *profileDir == "" {
		return
	}
	path := filepath.Join(*profileDir, file)
	raw, err := pprofOf(c, name, params...)
	if err == nil {
		err = os.WriteFile(path, raw, 0o644)
	}
	if err != nil {
		log("profile %s: %v", path, err)
		return
	}
	log("wrote profile %s", path)
}

// liveHeapMiB forces a collection in the server and returns the heap still
// in use: the memory a workspace really holds, without the collector's
// headroom that RSS also counts (GOGC lets the heap grow to twice the live
// size before collecting).
//
// It collects twice: objects in sync.Pools (the API server pools the
// buffers it encodes responses into, as large as the largest list it sent)
// survive one collection and are not what a workspace holds.
func (s *server) liveHeapMiB() float64 {
	if _, err := s.pprof("heap", "debug", "1", "gc", "1"); err != nil {
		return 0
	}
	raw, err := s.pprof("heap", "debug", "1", "gc", "1")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var n float64
		if _, err := fmt.Sscanf(line, "# HeapAlloc = %g", &n); err == nil {
			return n / (1 << 20)
		}
	}
	return 0
}

// goroutines is the server's goroutine count.
func (s *server) goroutines() int {
	raw, err := s.pprof("goroutine", "debug", "1")
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscanf(strings.SplitN(string(raw), "\n", 2)[0], "goroutine profile: total %d", &n)
	return n
}
