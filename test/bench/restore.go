package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/schema/tenancy"
)

var (
	restoreOnly       = flag.Bool("restore", false, "only measure workspace restores (issue 54): per datastore and size, a workspace's config maps are all overwritten and the workspace restored to the moment before; restore time, another tenant's write latency meanwhile, and the update rate with and without --change-history")
	restoreSizes      = flag.String("restore-sizes", "1000,10000", "objects per restored workspace in -restore (comma-separated)")
	restoreDatastores = flag.String("restore-datastores", "sqlite,postgres", "datastores of -restore")
	restoreIdleProbe  = flag.Duration("restore-idle-probe", 20*time.Second, "how long -restore measures another tenant's create latency before the restore (the idle baseline)")
	restorePaces      = flag.String("restore-writes-per-second", "0", "kcp start --restore-writes-per-second of -restore's server (comma-separated: each size is restored once per value; 0 is no bound, \"default\" the server's default)")
)

type restoreResult struct {
	datastore string
	objects   int
	// pace is the server's --restore-writes-per-second ("default": not set).
	pace string
	// restore: from the WorkspaceRestore's creation to Succeeded.
	restore time.Duration
	writes  int64
	// Another tenant's sequential writes: before the restore and during it.
	otherBefore, otherDuring []time.Duration
	// Updates per second of the workspace's objects, with the history on
	// (the damage the restore undoes) and off (same server build, a second
	// server without --change-history).
	updatesWith, updatesWithout float64
}

func benchRestore(log func(string, ...any)) ([]restoreResult, error) {
	var out []restoreResult
	_, err := eachSize(*restoreDatastores, *restoreSizes, "-restore-sizes", "restore", log, func(d string, n int) (restoreResult, error) {
		for i, pace := range strings.Split(*restorePaces, ",") {
			pace = strings.TrimSpace(pace)
			log("-- restore-writes-per-second %s", pace)
			// The update rate without the history once per size.
			r, err := restoreOnce(d, n, pace, i == 0, log)
			if err != nil {
				return r, err
			}
			out = append(out, r)
		}
		return restoreResult{}, nil
	})
	return out, err
}

// eachSize runs once per datastore and size of two comma-separated flag
// values (postgres skipped without -postgres), logging each as "what".
func eachSize[R any](datastores, sizes, sizesFlag, what string, log func(string, ...any), once func(d string, n int) (R, error)) ([]R, error) {
	var out []R
	for _, d := range strings.Split(datastores, ",") {
		if d == "" || (d == "postgres" && *pgDSN == "") {
			continue
		}
		for _, size := range strings.Split(sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(size))
			if err != nil || n <= 0 {
				return out, fmt.Errorf("%s: %q is not a positive number", sizesFlag, size)
			}
			log("== %s of %d objects on %s", what, n, d)
			r, err := once(d, n)
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// restoreServer starts kcp on a fresh datastore of kind d.
func restoreServer(d string, extra []string) (*server, func(), error) {
	tmp, err := os.MkdirTemp("", "kcp-bench-restore-")
	if err != nil {
		return nil, nil, err
	}
	s := &server{dir: filepath.Join(tmp, "root"), port: freePort(), extra: extra}
	cleanup := func() { os.RemoveAll(tmp) }
	if d == "postgres" {
		dsn, drop, err := freshPostgres()
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		s.ds = dsn
		cleanup = func() { drop(); os.RemoveAll(tmp) }
	}
	if _, err := s.start(); err != nil {
		cleanup()
		return nil, nil, err
	}
	return s, func() { s.stop(); cleanup() }, nil
}

// fill creates n config maps in cluster's default namespace and then
// updates them all; it returns the updates per second.
func fill(s *server, cluster string, n int, point func()) (float64, error) {
	c, err := s.client(cluster)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	cms := c.CoreV1().ConfigMaps("default")
	if err := inParallel(n, func(i int) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)},
			Data: map[string]string{"v": strings.Repeat("x", 200) + strconv.Itoa(i)}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	if point != nil {
		point()
	}
	t0 := time.Now()
	if err := inParallel(n, func(i int) error {
		_, err := cms.Patch(ctx, fmt.Sprintf("cm-%d", i), types.MergePatchType, []byte(`{"data":{"v":"overwritten"}}`), metav1.PatchOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

func inParallel(n int, f func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}

// probe writes config maps in cluster one after another until stop,
// returning each write's latency.
func probe(c *kubernetes.Clientset, prefix string, stop <-chan struct{}) []time.Duration {
	lat, _ := probeAt(c, prefix, stop)
	return lat
}

// probeAt is probe that also returns when each sample started.
func probeAt(c *kubernetes.Clientset, prefix string, stop <-chan struct{}) ([]time.Duration, []time.Time) {
	var lat []time.Duration
	var at []time.Time
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return lat, at
		default:
		}
		t0 := time.Now()
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}}, metav1.CreateOptions{}); err == nil {
			lat = append(lat, time.Since(t0))
			at = append(at, t0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func restoreOnce(d string, n int, pace string, plain bool, log func(string, ...any)) (restoreResult, error) {
	r := restoreResult{datastore: d, objects: n, pace: pace}
	// The update rate without the history, on a server of its own.
	if plain {
		s, stop, err := restoreServer(d, nil)
		if err != nil {
			return r, err
		}
		if err := s.createWorkspaces([][2]string{{"root", "plain"}}); err != nil {
			stop()
			return r, err
		}
		r.updatesWithout, err = fill(s, "root:plain", n, nil)
		stop()
		if err != nil {
			return r, err
		}
		log("updates without history: %.0f/s", r.updatesWithout)
	}
	args := []string{"--change-history"}
	if pace != "default" {
		args = append(args, "--restore-writes-per-second="+pace)
	}
	s, stop, err := restoreServer(d, args)
	if err != nil {
		return r, err
	}
	defer stop()
	if err := s.createWorkspaces([][2]string{{"root", "restored"}, {"root", "other"}}); err != nil {
		return r, err
	}
	var point time.Time
	r.updatesWith, err = fill(s, "root:restored", n, func() {
		time.Sleep(1100 * time.Millisecond)
		point = time.Now().UTC()
		time.Sleep(1100 * time.Millisecond)
	})
	if err != nil {
		return r, err
	}
	log("updates with history: %.0f/s", r.updatesWith)
	other, err := s.client("root:other")
	if err != nil {
		return r, err
	}
	stopProbe := make(chan struct{})
	go func() { time.Sleep(*restoreIdleProbe); close(stopProbe) }()
	r.otherBefore = probe(other, "before", stopProbe)

	d2, err := s.dynamic("root")
	if err != nil {
		return r, err
	}
	restores := d2.Resource(tenancy.WorkspaceRestoresResource)
	ctx := context.Background()
	duringStop := make(chan struct{})
	during := make(chan []time.Duration)
	var duringAt []time.Time
	go func() {
		lat, at := probeAt(other, "during", duringStop)
		duringAt = at
		during <- lat
	}()
	t0 := time.Now()
	if _, err := restores.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "WorkspaceRestore",
		"metadata": map[string]interface{}{"name": "bench"},
		"spec":     map[string]interface{}{"workspace": "restored", "to": point.Format(time.RFC3339)},
	}}, metav1.CreateOptions{}); err != nil {
		close(duringStop)
		<-during
		return r, err
	}
	for {
		got, err := restores.Get(ctx, "bench", metav1.GetOptions{})
		if err != nil {
			close(duringStop)
			<-during
			return r, err
		}
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		if phase == tenancy.RestoreSucceeded || phase == tenancy.RestoreFailed {
			r.restore = time.Since(t0)
			msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
			r.writes, _, _ = unstructured.NestedInt64(got.Object, "status", "summary", "total")
			close(duringStop)
			r.otherDuring = <-during
			if phase == tenancy.RestoreFailed {
				return r, fmt.Errorf("the restore failed: %s", msg)
			}
			log("restore: %s (%s)", r.restore.Round(time.Millisecond), msg)
			log("another tenant's slowest creates during it (since the restore's create): %s", slowest(r.otherDuring, duringAt, t0, 6))
			return r, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slowest names the n slowest samples with when each started after t0:
// where in a restore (planning, writes, the end) the tail comes from.
func slowest(lat []time.Duration, at []time.Time, t0 time.Time, n int) string {
	idx := make([]int, len(lat))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return lat[idx[a]] > lat[idx[b]] })
	var parts []string
	for _, i := range idx[:min(n, len(idx))] {
		parts = append(parts, fmt.Sprintf("%s at +%.2fs", lat[i].Round(100*time.Microsecond), at[i].Sub(t0).Seconds()))
	}
	return strings.Join(parts, ", ")
}

func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := append([]time.Duration{}, lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func renderRestore(rs []restoreResult) string {
	var b strings.Builder
	b.WriteString("| datastore | --restore-writes-per-second | objects restored | restore (create -> Succeeded) | writes/s | another tenant's create p50 / p99, before | during the restore | updates/s with history | without |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %.0f | %s / %s (%d) | %s / %s (%d) | %.0f | %s |\n", r.datastore, r.pace, r.writes, r.restore.Round(10*time.Millisecond),
			float64(r.writes)/r.restore.Seconds(),
			pct(r.otherBefore, .5).Round(100*time.Microsecond), pct(r.otherBefore, .99).Round(100*time.Microsecond), len(r.otherBefore),
			pct(r.otherDuring, .5).Round(100*time.Microsecond), pct(r.otherDuring, .99).Round(100*time.Microsecond), len(r.otherDuring),
			r.updatesWith, without(r.updatesWithout))
	}
	return b.String()
}

// without is the update rate without the history, measured once per size.
func without(rate float64) string {
	if rate == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", rate)
}
