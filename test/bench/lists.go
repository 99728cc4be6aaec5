package main

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/datastore"
)

var (
	listTotals   = flag.String("list-totals", "10000:100,100000:1000,1000000:10000", "per-tenant list steps, objects:clusters each (cumulative); '' skips")
	listSamples  = flag.Int("list-samples", 300, "lists per step")
	listDialects = flag.String("list-datastores", "sqlite,postgres", "datastores for the per-tenant list benchmark")
)

type listResult struct {
	datastore       string
	total, clusters int
	p50, p99        time.Duration
	rssMiB, heapMiB float64
	seedSecs        float64
	// settle is how long the server stayed busy after its start (filling
	// its caches from the datastore); the lists are measured after it.
	settle  time.Duration
	settled bool
}

// seedConfigMaps writes config maps of filler clusters straight into the
// kine table while the server is stopped (the only time that is allowed):
// creating a million objects through the API would take most of an hour.
// Rows look like what kcp writes: key layout, JSON, cluster annotation.
func seedConfigMaps(ds *datastore.Datastore, from, to, clusters int) error {
	db, err := ds.Open()
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	const batch = 500
	insert := func(tx *sql.Tx, rows int, start int) error {
		keys, values := make([]string, 0, rows), make([]string, 0, rows)
		for r := 0; r < rows; r++ {
			i := start + r
			cluster := fmt.Sprintf("root:filler-%d", i%clusters)
			name := fmt.Sprintf("cm-%d", i)
			keys = append(keys, fmt.Sprintf("/registry/core/configmaps/%s/default/%s", cluster, name))
			values = append(values, fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"default","uid":"00000000-0000-0000-0000-%012d","creationTimestamp":"2026-11-23T00:00:00Z","annotations":{"kcp.io/cluster":%q}},"data":{"color":"blue","size":"%d"}}`, name, i, cluster, i))
		}
		return insertRows(ctx, tx, ds.Dialect, keys, values)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for i := from; i < to; i += batch {
		n := min(batch, to-i)
		if err := insert(tx, n, i); err != nil {
			tx.Rollback()
			return err
		}
		if (i-from)%100000 == 0 && i > from {
			if err := tx.Commit(); err != nil {
				return err
			}
			if tx, err = db.BeginTx(ctx, nil); err != nil {
				return err
			}
		}
	}
	return tx.Commit()
}

// startSeedable starts a server (bin, or -kcp) on a new root directory and,
// for kind "postgres", a new database, for benchmarks that write rows into
// its datastore while it is stopped; cleanup removes both.
func startSeedable(bin, kind, prefix string) (*server, *datastore.Datastore, func(), error) {
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	s := &server{bin: bin, dir: filepath.Join(tmp, "root"), port: freePort()}
	if kind == "postgres" {
		dsn, drop, err := freshPostgres()
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		cleanup = func() { drop(); os.RemoveAll(tmp) }
		s.ds = dsn
	}
	ds, err := datastore.Parse(s.ds, s.dir)
	if err == nil {
		_, err = s.start()
	}
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return s, ds, cleanup, nil
}

// insertRows writes new keys into the kine table as kine writes a create
// (the row's id is its revision), in one statement.
func insertRows(ctx context.Context, tx *sql.Tx, dialect datastore.Dialect, keys, values []string) error {
	var q strings.Builder
	q.WriteString("INSERT INTO kine(name, created, deleted, create_revision, prev_revision, lease, value, old_value) VALUES ")
	args := make([]any, 0, 2*len(keys))
	for i := range keys {
		if i > 0 {
			q.WriteString(",")
		}
		if dialect == datastore.Postgres {
			fmt.Fprintf(&q, "($%d, 1, 0, 0, 0, 0, $%d, NULL)", 2*i+1, 2*i+2)
		} else {
			q.WriteString("(?, 1, 0, 0, 0, 0, ?, NULL)")
		}
		args = append(args, keys[i], []byte(values[i]))
	}
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
}

func parseSteps(s string) ([][2]int, error) {
	var out [][2]int
	for _, step := range strings.Split(s, ",") {
		if step == "" {
			continue
		}
		a, b, ok := strings.Cut(step, ":")
		t, err1 := strconv.Atoi(a)
		c, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || c <= 0 {
			return nil, fmt.Errorf("-list-totals: %q is not objects:clusters", step)
		}
		out = append(out, [2]int{t, c})
	}
	return out, nil
}

// benchLists measures the list latency of one tenant holding 100 config
// maps while the datastore grows around it.
func benchLists(kind string, log func(string, ...any)) ([]listResult, error) {
	steps, err := parseSteps(*listTotals)
	if err != nil || len(steps) == 0 {
		return nil, err
	}
	s, ds, cleanup, err := startSeedable("", kind, "kcp-bench-lists-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := s.createWorkspaces([][2]string{{"root", "tenant"}}); err != nil {
		return nil, err
	}
	c, err := s.client("root:tenant")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	for i := range 100 {
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tenant-%d", i)}, Data: map[string]string{"color": "blue"}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	var out []listResult
	seeded := 0
	for _, step := range steps {
		s.stop()
		t0 := time.Now()
		if err := seedConfigMaps(ds, seeded, step[0], step[1]); err != nil {
			return nil, fmt.Errorf("seeding %d objects: %v", step[0], err)
		}
		seedSecs := time.Since(t0).Seconds()
		seeded = step[0]
		if _, err := s.start(); err != nil {
			return nil, err
		}
		s.writeProfile(fmt.Sprintf("lists-%s-%d.pprof", kind, step[0]), log, "profile", "seconds", "30")
		settle, settled := waitSettled(s.cmd.Process.Pid, 10*time.Minute)
		if c, err = s.client("root:tenant"); err != nil {
			return nil, err
		}
		lat := make([]time.Duration, 0, *listSamples)
		for range *listSamples {
			t := time.Now()
			list, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t))
			if len(list.Items) != 101 { // 100 + kube-root-ca.crt
				return nil, fmt.Errorf("tenant list returned %d config maps, want 101", len(list.Items))
			}
		}
		r := listResult{datastore: kind, total: seeded + 100, clusters: step[1] + 1, p50: percentile(lat, 0.5), p99: percentile(lat, 0.99),
			rssMiB: rssMiB(s.cmd.Process.Pid), heapMiB: s.liveHeapMiB(), seedSecs: seedSecs, settle: settle, settled: settled}
		log("%s: %d objects in %d clusters: tenant list p50 %s p99 %s (seeded in %.0fs; busy for %s after start)", kind, r.total, r.clusters, r.p50, r.p99, seedSecs, settle.Round(time.Second))
		out = append(out, r)
	}
	s.stop()
	return out, nil
}

func renderLists(rs []listResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nPer-tenant list latency: one tenant lists its 100 config maps (plus kube-root-ca.crt) %d times, sequentially, while the datastore grows around it; filler config maps are written into the table with the server stopped, then the server starts and the lists begin once it is idle (below 20%% of a core; the time until then is its start-up work at that size):\n\n", *listSamples)
	fmt.Fprintf(&b, "| datastore | config maps in total | clusters | busy after start | tenant list p50 | p99 | RSS | live heap |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		busy := r.settle.Round(time.Second).String()
		if !r.settled {
			busy = "still busy after " + busy
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %.1f ms | %.1f ms | %.0f MiB | %.0f MiB |\n", r.datastore, r.total, r.clusters, busy,
			float64(r.p50.Microseconds())/1000, float64(r.p99.Microseconds())/1000, r.rssMiB, r.heapMiB)
	}
	return b.String()
}

// cpuSeconds is the CPU time a process has used (user + system).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces; utime and stime are the 12th and 13th of them, in
	// clock ticks (100 per second on Linux).
	rest := string(b[bytes.LastIndexByte(b, ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// waitSettled waits until a process has used less than a fifth of a core
// for three seconds in a row, or max has passed (false).
func waitSettled(pid int, max time.Duration) (time.Duration, bool) {
	t0 := time.Now()
	last, quiet := cpuSeconds(pid), 0
	for time.Since(t0) < max {
		time.Sleep(time.Second)
		now := cpuSeconds(pid)
		if now-last < 0.2 {
			quiet++
		} else {
			quiet = 0
		}
		last = now
		if quiet == 3 {
			return time.Since(t0), true
		}
	}
	return time.Since(t0), false
}
