package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/datastore"
)

// The scale benchmark (issue 19): what a server holding many empty
// workspaces costs and how fast it starts. Creating 100,000 workspaces
// through the API would take most of an hour on 2 cores, so it creates one
// through the API, then, with the server stopped (the only time rows may be
// written around it), writes copies of that workspace's rows (its Workspace
// in root and everything stored in its logical cluster, names and UIDs
// changed) into the kine table, restarts the server and measures.
var (
	scaleOnly       = flag.Bool("scale-only", false, "run only the workspace scale benchmark (-scale-workspaces, -scale-datastores) and print its table")
	scaleSteps      = flag.String("scale-workspaces", "1000,10000,100000", "workspace counts of the scale benchmark (cumulative, one server per datastore)")
	scaleDatastores = flag.String("scale-datastores", "sqlite,postgres", "datastores of the scale benchmark")
	scaleCreates    = flag.Int("scale-creates", 200, "workspaces created through the API at each size of the scale benchmark (the creation rate at that size)")
	scaleBefore     = flag.String("scale-before", "", "another kcp binary (a build of an earlier commit) to run the scale benchmark with too, side by side")
	scaleRSSLater   = flag.Duration("scale-rss-later", 90*time.Second, "how long after the server is idle the scale benchmark reads its RSS a second time (what it keeps once the start-up fill's garbage is returned; 0: not read), and the CPU the idle server uses meanwhile")
)

type scaleResult struct {
	binary     string
	datastore  string
	workspaces int
	// ready is from the start of the process to /readyz; settled from
	// there until the server is idle (its caches filled).
	ready, settled time.Duration
	// rss and heap are after settling; per-workspace figures are relative
	// to the server holding just the template workspace.
	rssMiB, heapMiB     float64
	rssPerWS, heapPerWS float64
	// rssLater is RSS -scale-rss-later after settling.
	rssLaterMiB, rssLaterPerWS float64
	// idleCPU is the server's CPU use while it waited for the second RSS
	// reading, in percent of one core: what an idle server with this many
	// workspaces costs (watch cache consistency checks, resyncs, sweeps).
	idleCPU                   float64
	goroutines                int
	createsPerSec             float64
	seedSecs                  float64
	baseRSSMiB, baseHeapMiB   float64
	rowsPerWorkspace, rowsAll int
}

const scaleTemplate = "scale-template"

var uidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// templateRows reads the live rows of the template workspace: its
// Workspace in root and every object stored in its logical cluster.
func templateRows(db *sql.DB, dialect datastore.Dialect) ([][2]string, error) {
	q := `SELECT key, object FROM kcp_objects WHERE cluster = $1 OR key = $2`
	if dialect == datastore.SQLite {
		q = strings.NewReplacer("$1", "?", "$2", "?").Replace(q)
	}
	rows, err := db.Query(q, "root:"+scaleTemplate, "/registry/tenancy.kcp.io/workspaces/root/"+scaleTemplate)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out = append(out, [2]string{k, v})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("the template workspace has %d rows; expected its Workspace and its logical cluster's objects", len(out))
	}
	return out, nil
}

// seedWorkspaces writes copies from..to-1 of the template rows, as
// workspaces "s-<i>" of root. Each copy gets UIDs of its own.
func seedWorkspaces(ds *datastore.Datastore, tmpl [][2]string, from, to int, log func(string, ...any)) error {
	db, err := ds.Open()
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	perStmt := 400 / len(tmpl) * len(tmpl)
	if perStmt == 0 {
		perStmt = len(tmpl)
	}
	var keys, values []string
	flush := func(tx *sql.Tx) error {
		if len(keys) == 0 {
			return nil
		}
		err := insertRows(ctx, tx, ds.Dialect, keys, values)
		keys, values = keys[:0], values[:0]
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for i := from; i < to; i++ {
		name := fmt.Sprintf("s-%07d", i)
		uids := map[string]string{}
		for _, row := range tmpl {
			v := strings.ReplaceAll(row[1], scaleTemplate, name)
			v = uidPattern.ReplaceAllStringFunc(v, func(u string) string {
				if got, ok := uids[u]; ok {
					return got
				}
				n := fmt.Sprintf("5ca1e000-%04x-4000-8000-%012d", len(uids), i)
				uids[u] = n
				return n
			})
			keys = append(keys, strings.ReplaceAll(row[0], scaleTemplate, name))
			values = append(values, v)
		}
		if len(keys) >= perStmt {
			if err := flush(tx); err != nil {
				tx.Rollback()
				return err
			}
		}
		if (i-from+1)%20000 == 0 {
			if err := tx.Commit(); err != nil {
				return err
			}
			log("  seeded %d of %d workspaces (%.0f/s)", i-from+1, to-from, float64(i-from+1)/time.Since(t0).Seconds())
			if tx, err = db.BeginTx(ctx, nil); err != nil {
				return err
			}
		}
	}
	if err := flush(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// benchScale runs the scale benchmark on one datastore with one binary.
func benchScale(bin, kind string, steps []int, log func(string, ...any)) ([]scaleResult, error) {
	s, ds, cleanup, err := startSeedable(bin, kind, "kcp-bench-scale-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := s.createWorkspaces([][2]string{{"root", scaleTemplate}}); err != nil {
		s.stop()
		return nil, err
	}
	waitSettled(s.cmd.Process.Pid, 2*time.Minute)
	baseHeap, baseRSS := s.liveHeapMiB(), rssMiB(s.cmd.Process.Pid)
	s.stop()
	db, err := ds.Open()
	if err != nil {
		return nil, err
	}
	tmpl, err := templateRows(db, ds.Dialect)
	db.Close()
	if err != nil {
		return nil, err
	}
	log("template workspace: %d rows; server with it alone: RSS %.0f MiB, live heap %.1f MiB", len(tmpl), baseRSS, baseHeap)

	var out []scaleResult
	have := 0
	created := 0
	for _, n := range steps {
		r := scaleResult{binary: bin, datastore: kind, workspaces: n, baseRSSMiB: baseRSS, baseHeapMiB: baseHeap, rowsPerWorkspace: len(tmpl)}
		if n > have+created {
			t0 := time.Now()
			if err := seedWorkspaces(ds, tmpl, have, n-created, log); err != nil {
				return out, fmt.Errorf("seeding: %w", err)
			}
			r.seedSecs = time.Since(t0).Seconds()
			have = n - created
			if ds.Dialect == datastore.Postgres {
				// What an operator does after a bulk load: without it,
				// autovacuum works through the new rows while the
				// benchmark measures.
				t1 := time.Now()
				if err := vacuum(ds); err != nil {
					return out, err
				}
				log("  VACUUM ANALYZE kine: %s", time.Since(t1).Round(time.Second))
			}
		}
		// With -profile-dir, a CPU profile of the start: from the moment
		// the server answers until it has been ready and busy for a while.
		startProfile := make(chan struct{})
		if *profileDir != "" {
			go func() {
				defer close(startProfile)
				file := fmt.Sprintf("scale-%s-%s-%d-start-cpu.pprof", kind, profileName(bin), n)
				for t0 := time.Now(); time.Since(t0) < time.Minute; time.Sleep(100 * time.Millisecond) {
					c, err := s.client("root")
					if err != nil {
						continue
					}
					if raw, err := pprofOf(c, "profile", "seconds", "55"); err == nil {
						os.WriteFile(filepath.Join(*profileDir, file), raw, 0o644)
						log("wrote profile %s (the first 55 s after the server answered)", file)
						return
					}
				}
			}()
		} else {
			close(startProfile)
		}
		log("  starting the server with %d workspaces (it fills its caches before /readyz)", n)
		if r.ready, err = s.start(); err != nil {
			return out, err
		}
		settled, ok := waitSettled(s.cmd.Process.Pid, 20*time.Minute)
		if !ok {
			log("  still busy after %s", settled)
		}
		r.settled = settled
		<-startProfile
		r.heapMiB, r.rssMiB, r.goroutines = s.liveHeapMiB(), rssMiB(s.cmd.Process.Pid), s.goroutines()
		total := have + created
		if *scaleRSSLater > 0 {
			log("  ready %s after start and idle %s later; reading RSS again in %s", r.ready.Round(time.Millisecond), settled.Round(time.Second), *scaleRSSLater)
			cpu0, until := cpuSeconds(s.cmd.Process.Pid), time.Now().Add(*scaleRSSLater)
			// With -profile-dir, a CPU profile of the idle server: the
			// last minute of the wait (or all of a shorter one).
			idleProfile := min(*scaleRSSLater, time.Minute)
			time.Sleep(time.Until(until) - idleProfile)
			s.writeProfile(fmt.Sprintf("scale-%s-%s-%d-idle-cpu.pprof", kind, profileName(bin), n), log, "profile", "seconds", fmt.Sprint(int(idleProfile.Seconds())))
			time.Sleep(time.Until(until))
			r.idleCPU = 100 * (cpuSeconds(s.cmd.Process.Pid) - cpu0) / scaleRSSLater.Seconds()
			r.rssLaterMiB = rssMiB(s.cmd.Process.Pid)
			r.rssLaterPerWS = (r.rssLaterMiB - baseRSS) * 1024 / float64(total)
		}
		tag := fmt.Sprintf("scale-%s-%s-%d", kind, profileName(bin), n)
		s.writeProfile(tag+"-heap.pprof", log, "heap", "gc", "1")
		s.writeProfile(tag+"-goroutine.txt", log, "goroutine", "debug", "1")
		r.rssPerWS = (r.rssMiB - baseRSS) * 1024 / float64(total)
		r.heapPerWS = (r.heapMiB - baseHeap) * 1024 / float64(total)
		if err := checkSeeded(s, have); err != nil {
			s.stop()
			return out, err
		}
		// The creation rate at this size, through the API.
		var pairs [][2]string
		for i := 0; i < *scaleCreates; i++ {
			pairs = append(pairs, [2]string{"root", fmt.Sprintf("c-%d-%d", n, i)})
		}
		root, err := s.client("root")
		if err != nil {
			s.stop()
			return out, err
		}
		profiling := cpuProfile(root, tag+"-creates-cpu.pprof", "creating workspaces", log)
		ended0 := terminatedWatchers(root)
		t0 := time.Now()
		if err := s.createWorkspaces(pairs); err != nil {
			s.stop()
			return out, err
		}
		r.createsPerSec = float64(len(pairs)) / time.Since(t0).Seconds()
		profiling()
		if ended0 >= 0 {
			if ended := terminatedWatchers(root); ended >= 0 {
				log("  the watch cache ended %.0f watches whose client fell behind while creating (apiserver_terminated_watchers_total)", ended-ended0)
			}
		}
		created += len(pairs)
		s.stop()
		log("%s, %d workspaces: ready %s after start, idle %s later; RSS %.0f MiB (%.1f KiB/workspace), live heap %.0f MiB (%.1f KiB/workspace); %d goroutines; %.0f workspaces/s created at this size",
			kind, total, r.ready.Round(time.Millisecond), settled.Round(time.Second), r.rssMiB, r.rssPerWS, r.heapMiB, r.heapPerWS, r.goroutines, r.createsPerSec)
		out = append(out, r)
	}
	return out, nil
}

// checkSeeded checks that seeded workspaces work like created ones: the
// last one is Ready and reachable, its defaults are there, and it takes a
// write.
func checkSeeded(s *server, have int) error {
	ctx := context.Background()
	name := fmt.Sprintf("root:s-%07d", have-1)
	c, err := s.client(name)
	if err != nil {
		return err
	}
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("seeded workspace %s: %w", name, err)
	}
	if len(nss.Items) == 0 {
		return fmt.Errorf("seeded workspace %s has no namespaces", name)
	}
	if _, err := c.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
		return fmt.Errorf("seeded workspace %s: %w", name, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36)}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("seeded workspace %s refuses a write: %w", name, err)
	}
	return c.CoreV1().ConfigMaps("default").Delete(ctx, cm.Name, metav1.DeleteOptions{})
}

func runScale(log func(string, ...any)) ([]scaleResult, error) {
	var steps []int
	for _, f := range strings.Split(*scaleSteps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-scale-workspaces: %q is not a positive count", f)
		}
		if len(steps) > 0 && n <= steps[len(steps)-1] {
			return nil, fmt.Errorf("-scale-workspaces must grow: %d after %d", n, steps[len(steps)-1])
		}
		steps = append(steps, n)
	}
	bins := []string{""}
	if *scaleBefore != "" {
		bins = []string{*scaleBefore, ""}
	}
	var out []scaleResult
	for _, kind := range strings.Split(*scaleDatastores, ",") {
		if kind == "" || (kind == "postgres" && *pgDSN == "") {
			continue
		}
		for _, bin := range bins {
			log("== scale on %s with %s", kind, binName(bin))
			rs, err := benchScale(bin, kind, steps, log)
			out = append(out, rs...)
			if err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

func binName(bin string) string {
	if bin == "" {
		return *kcpBin
	}
	return bin
}

// profileName names a binary's profiles: "before" for -scale-before, so
// that two builds both called kcp do not overwrite each other's.
func profileName(bin string) string {
	if bin != "" && bin == *scaleBefore {
		return "before"
	}
	return filepath.Base(binName(bin))
}

func renderScale(rs []scaleResult) string {
	var b strings.Builder
	later := fmt.Sprintf("RSS per workspace %s later", *scaleRSSLater)
	b.WriteString("| binary | datastore | workspaces | rows per workspace | ready after start | then idle after | RSS | RSS per workspace | " + later + " | CPU meanwhile (% of a core) | live heap | live heap per workspace | goroutines | workspaces/s created at this size |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %.0f MiB | %.1f KiB | %.1f KiB | %.1f | %.0f MiB | %.1f KiB | %d | %.0f |\n",
			binName(r.binary), r.datastore, r.workspaces, r.rowsPerWorkspace, r.ready.Round(10*time.Millisecond), r.settled.Round(time.Second),
			r.rssMiB, r.rssPerWS, r.rssLaterPerWS, r.idleCPU, r.heapMiB, r.heapPerWS, r.goroutines, r.createsPerSec)
	}
	return b.String()
}

func vacuum(ds *datastore.Datastore) error {
	db, err := ds.Open()
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec("VACUUM ANALYZE kine")
	return err
}

// terminatedWatchers sums apiserver_terminated_watchers_total over all
// resources: watches the watch cache ended because their client fell
// behind. -1 if /metrics could not be read.
func terminatedWatchers(c kubernetes.Interface) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return -1
	}
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_terminated_watchers_total{") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}
