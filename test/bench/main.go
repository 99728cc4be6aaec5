// Command bench measures kcp on SQL with the real binary: start-up time (cold
// and warm), idle RSS, and create throughput and latency with concurrent
// clients, on SQLite and PostgreSQL. It prints a Markdown table and, with
// -write, replaces the generated section of docs/performance.md.
//
//	make bench                 # full sizes
//	make bench-quick           # small sizes, a minute or two
package main

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	kcpBin       = flag.String("kcp", "bin/kcp", "path to the kcp binary")
	startTimeout = flag.Duration("start-timeout", 10*time.Minute, "how long a kcp server the benchmark starts may take to be ready (restarts at 100,000 workspaces take minutes on a slow machine)")
	kcpArgs      = flag.String("kcp-args", "", "extra arguments for every kcp server the benchmark starts, e.g. --watch-cache=false")
	creates      = flag.Int("creates", 4000, "configmaps to create per datastore")
	clients      = flag.Int("clients", 16, "concurrent clients")
	clusters     = flag.Int("clusters", 16, "logical clusters the creates are spread over")
	pgDSN        = flag.String("postgres", envOr("KCP_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL server for the postgres runs ('' to skip)")
	write        = flag.String("write", "", "Markdown file whose generated section is replaced with the results")
	wsCount      = flag.Int("workspaces", 1000, "empty workspaces to create (flat, then as a tree) per datastore; 0 skips")
	featureCost  = flag.Bool("feature-cost", true, "also measure creates with --change-history and --audit-to-datastore on, and with a ResourceQuota per namespace and workspace limits")
	// benchQuota: run puts a ResourceQuota in every bench namespace.
	benchQuota     bool
	latencySamples = flag.Int("latency-samples", 200, "writes per watch-latency measurement (PostgreSQL, one and two replicas); 0 skips")
)

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

type result struct {
	datastore            string
	coldStart, warmStart time.Duration
	idleRSSMiB           float64
	createsPerSec        float64
	p50, p99             time.Duration
	rssAfterMiB          float64
}

func main() {
	flag.Parse()
	log := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	if *failoverOnly {
		r, err := benchFailover(log)
		if err != nil {
			log("failover benchmark failed: %v", err)
			os.Exit(1)
		}
		printFailover(r)
		return
	}
	if *noisyOnly {
		var rs []noisyResult
		bins := []string{""}
		if *noisyBefore != "" {
			bins = []string{*noisyBefore, ""}
		}
		for _, bin := range bins {
			r, err := benchNoisy(bin, log)
			if err != nil {
				log("noisy-neighbour benchmark failed: %v", err)
				os.Exit(1)
			}
			rs = append(rs, r)
		}
		fmt.Print(renderNoisy(rs))
		return
	}
	if *sqliteInserts > 0 {
		if err := benchSQLiteInserts(*sqliteInserts, log); err != nil {
			log("SQLite insert benchmark failed: %v", err)
			os.Exit(1)
		}
		return
	}
	if *quotasOnly {
		r, err := benchQuotas(log)
		if err != nil {
			log("quota benchmark failed: %v", err)
			os.Exit(1)
		}
		fmt.Print(renderQuotas(r))
		return
	}
	if *streamsOnly {
		r, err := benchStreams(log)
		if err != nil {
			log("streams benchmark failed: %v", err)
			os.Exit(1)
		}
		fmt.Print(renderStreams(r))
		return
	}
	if *snapshotOnly {
		r, err := benchSnapshots(log)
		if err != nil {
			log("snapshot benchmark failed: %v", err)
			os.Exit(1)
		}
		fmt.Print(renderSnapshots(r))
		return
	}
	if *startupRounds > 0 {
		r, err := benchStartup(log)
		if err != nil {
			log("start-up benchmark failed: %v", err)
			os.Exit(1)
		}
		fmt.Print(renderStartup(r))
		return
	}
	if *restoreOnly {
		r, err := benchRestore(log)
		if err != nil {
			log("restore benchmark failed: %v", err)
			os.Exit(1)
		}
		fmt.Print(renderRestore(r))
		return
	}
	if *moveOnly {
		if err := benchMove(log); err != nil {
			log("move benchmark failed: %v", err)
			os.Exit(1)
		}
		return
	}
	if *shardsOnly {
		if err := benchShards(log); err != nil {
			log("shards benchmark failed: %v", err)
			os.Exit(1)
		}
		return
	}
	if *rolloutOnly {
		r, err := benchRollout(log)
		if err != nil {
			log("rollout benchmark failed: %v", err)
			os.Exit(1)
		}
		printRollout(r)
		return
	}
	if *evictionsOnly {
		r, err := benchEvictions(log)
		if err != nil {
			log("eviction benchmark failed: %v", err)
			os.Exit(1)
		}
		fmt.Print(renderEvictions(r))
		return
	}
	if *placeRateOnly {
		r, err := benchPlaceRate(log)
		fmt.Print(renderPlaceRate(r))
		if err != nil {
			log("placement-rate benchmark failed: %v", err)
			os.Exit(1)
		}
		return
	}
	if *tokensOnly {
		r, err := benchTokens(log)
		if err != nil {
			log("token benchmark failed: %v", err)
			os.Exit(1)
		}
		fmt.Print(renderTokens(r))
		return
	}
	if *apisOnly {
		var rs []apisResult
		bins := []string{""}
		if *apisBefore != "" {
			bins = []string{*apisBefore, ""}
		}
		for _, bin := range bins {
			r, err := benchAPIs(bin, log)
			if err != nil {
				log("API-sharing benchmark failed: %v", err)
				os.Exit(1)
			}
			rs = append(rs, r)
		}
		fmt.Print(renderAPIs(rs))
		return
	}
	if *scaleOnly {
		rs, err := runScale(log)
		fmt.Print(renderScale(rs))
		if err != nil {
			log("scale benchmark failed: %v", err)
			os.Exit(1)
		}
		return
	}
	if *syncOnly {
		r, err := benchSync(log)
		if err != nil {
			log("sync benchmark failed: %v", err)
			os.Exit(1)
		}
		printSync(r)
		return
	}
	var results []result
	var wsResults []wsResult
	dss := []string{"sqlite"}
	if *pgDSN != "" {
		dss = append(dss, "postgres")
	}
	for _, d := range dss {
		log("== %s", d)
		r, ws, err := run(d, nil, *wsCount, log)
		if err != nil {
			log("bench on %s failed: %v", d, err)
			os.Exit(1)
		}
		results = append(results, r)
		wsResults = append(wsResults, ws...)
		if *featureCost {
			policy := filepath.Join(os.TempDir(), "kcp-bench-audit-policy.yaml")
			os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"), 0o600)
			r, _, err := run(d, []string{"--change-history", "--audit-policy-file", policy, "--audit-to-datastore"}, 0, log)
			if err != nil {
				log("bench on %s with history and audit failed: %v", d, err)
				os.Exit(1)
			}
			r.datastore += " + change history + audit events"
			results = append(results, r)
			// Quota admission and workspace limits: a ResourceQuota in
			// every bench namespace that the creates are charged against,
			// and a workspace cap every create is checked against.
			benchQuota = true
			r, _, err = run(d, []string{"--workspace-max-objects=100000000"}, 0, log)
			benchQuota = false
			if err != nil {
				log("bench on %s with quotas failed: %v", d, err)
				os.Exit(1)
			}
			r.datastore += " + a ResourceQuota per namespace + workspace limits"
			results = append(results, r)
		}
	}
	var lat []latencyResult
	if *pgDSN != "" && *latencySamples > 0 {
		log("== watch latency")
		var err error
		if lat, err = runLatency(log); err != nil {
			log("watch latency failed: %v", err)
			os.Exit(1)
		}
	}
	var crds *crdResult
	if *crdClusters > 0 {
		log("== per-cluster CRDs")
		r, err := benchCRDs(*crdClusters, log)
		if err != nil {
			log("per-cluster CRDs failed: %v", err)
			os.Exit(1)
		}
		crds = &r
	}
	var lists []listResult
	for _, d := range strings.Split(*listDialects, ",") {
		if d == "" || (d == "postgres" && *pgDSN == "") {
			continue
		}
		log("== per-tenant lists on %s", d)
		rs, err := benchLists(d, log)
		if err != nil {
			log("per-tenant lists on %s failed: %v", d, err)
			os.Exit(1)
		}
		lists = append(lists, rs...)
	}
	var cmp []compareResult
	if *compareOps > 0 {
		log("== side by side with upstream kube-apiserver")
		var err error
		if cmp, err = benchCompare(log); err != nil {
			log("side by side failed: %v", err)
			os.Exit(1)
		}
	}
	table := render(results) + renderWorkspaces(wsResults) + renderLatency(lat) + renderCRDs(crds) + renderLists(lists) + renderCompare(cmp)
	fmt.Print(table)
	if *write != "" {
		if err := replaceSection(*write, table); err != nil {
			log("writing %s: %v", *write, err)
			os.Exit(1)
		}
		log("updated %s", *write)
	}
}

type server struct {
	bin   string // kcp binary; "" is -kcp
	cmd   *exec.Cmd
	dir   string
	port  int
	ds    string
	extra []string
	done  chan struct{}
}

func freePort() int {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *server) start() (time.Duration, error) {
	args := []string{"start", "--root-dir", s.dir, "--secure-port", fmt.Sprint(s.port)}
	if s.ds != "" {
		args = append(args, "--datastore", s.ds)
	}
	args = append(args, s.extra...)
	args = append(args, strings.Fields(*kcpArgs)...)
	logf, _ := os.OpenFile(filepath.Join(s.dir+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	t0 := time.Now()
	bin := *kcpBin
	if s.bin != "" {
		bin = s.bin
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return 0, err
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); logf.Close(); close(s.done) }()
	for time.Since(t0) < *startTimeout {
		select {
		case <-s.done:
			return 0, fmt.Errorf("kcp exited; see %s.log", s.dir)
		default:
		}
		if c, err := s.client("root"); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			cancel()
			if err == nil {
				return time.Since(t0), nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("not ready after %s (-start-timeout); see %s.log", *startTimeout, s.dir)
}

// startInTemp starts a kcp (bin; "" is -kcp) on SQLite in a new temporary
// directory named after name; stop stops it and removes the directory.
func startInTemp(name, bin string) (s *server, stop func(), err error) {
	tmp, err := os.MkdirTemp("", "kcp-bench-"+name+"-")
	if err != nil {
		return nil, nil, err
	}
	s = &server{dir: filepath.Join(tmp, "root"), port: freePort(), bin: bin}
	if _, err := s.start(); err != nil {
		os.RemoveAll(tmp)
		return nil, nil, err
	}
	return s, func() { s.stop(); os.RemoveAll(tmp) }, nil
}

func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
}

func (s *server) config(cluster string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(s.dir, "admin.kubeconfig"))
	if err != nil {
		return nil, err
	}
	cfg.Host = fmt.Sprintf("https://127.0.0.1:%d/clusters/%s", s.port, cluster)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg, nil
}

func (s *server) client(cluster string) (*kubernetes.Clientset, error) {
	cfg, err := s.config(cluster)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:")), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

func freshPostgres() (string, func(), error) {
	db, err := sql.Open("pgx", *pgDSN)
	if err != nil {
		return "", nil, err
	}
	name := fmt.Sprintf("kcp_bench_%d", time.Now().UnixNano())
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		return "", nil, fmt.Errorf("PostgreSQL at %s: %v", *pgDSN, err)
	}
	u, _ := url.Parse(*pgDSN)
	u.Path = "/" + name
	return u.String(), func() { db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); db.Close() }, nil
}

func run(kind string, extra []string, workspaces int, log func(string, ...any)) (result, []wsResult, error) {
	r := result{datastore: kind}
	tmp, err := os.MkdirTemp("", "kcp-bench-")
	if err != nil {
		return r, nil, err
	}
	defer os.RemoveAll(tmp)
	s := &server{dir: filepath.Join(tmp, "root"), port: freePort(), extra: extra}
	if kind == "postgres" {
		dsn, drop, err := freshPostgres()
		if err != nil {
			return r, nil, err
		}
		defer drop()
		s.ds = dsn
	}
	if r.coldStart, err = s.start(); err != nil {
		return r, nil, err
	}
	log("cold start %s", r.coldStart)
	time.Sleep(5 * time.Second)
	r.idleRSSMiB = rssMiB(s.cmd.Process.Pid)

	ctx := context.Background()
	var benchWS [][2]string
	for i := 0; i < *clusters; i++ {
		benchWS = append(benchWS, [2]string{"root", fmt.Sprintf("bench-%d", i)})
	}
	if err := s.createWorkspaces(benchWS); err != nil {
		return r, nil, err
	}
	cs := make([]*kubernetes.Clientset, *clusters)
	for i := range cs {
		c, err := s.client(fmt.Sprintf("root:bench-%d", i))
		if err != nil {
			return r, nil, err
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
			return r, nil, err
		}
		if benchQuota {
			q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
				Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("100000000")}}}
			if _, err := c.CoreV1().ResourceQuotas("bench").Create(ctx, q, metav1.CreateOptions{}); err != nil {
				return r, nil, err
			}
			// Creates are refused until the controller has counted it.
			for t0 := time.Now(); ; time.Sleep(50 * time.Millisecond) {
				if got, err := c.CoreV1().ResourceQuotas("bench").Get(ctx, "bench", metav1.GetOptions{}); err == nil && got.Status.Used != nil {
					break
				}
				if time.Since(t0) > 30*time.Second {
					return r, nil, fmt.Errorf("quota in root:bench-%d not counted after 30 s", i)
				}
			}
		}
		cs[i] = c
	}
	lat := make([]time.Duration, *creates)
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	next := make(chan int)
	t0 := time.Now()
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c := cs[i%len(cs)]
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": strings.Repeat("v", 256)}}
				st := time.Now()
				_, err := c.CoreV1().ConfigMaps("bench").Create(ctx, cm, metav1.CreateOptions{})
				lat[i] = time.Since(st)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < *creates; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(t0)
	if firstErr != nil {
		return r, nil, firstErr
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.createsPerSec = float64(*creates) / elapsed.Seconds()
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	r.rssAfterMiB = rssMiB(s.cmd.Process.Pid)
	log("creates/s %.0f p50 %s p99 %s", r.createsPerSec, r.p50, r.p99)
	s.stop()
	if r.warmStart, err = s.start(); err != nil {
		return r, nil, err
	}
	log("warm start %s", r.warmStart)
	var ws []wsResult
	if workspaces > 0 {
		if ws, err = benchWorkspaces(s, kind, workspaces, log); err != nil {
			return r, nil, err
		}
	}
	s.stop()
	return r, ws, nil
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			return strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
		}
	}
	return "unknown CPU"
}

// effectiveFlags lists the settings that shape the numbers.
func effectiveFlags() string {
	var out strings.Builder
	flag.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "write", "postgres", "kcp", "kube-apiserver", "etcd":
			return
		}
		fmt.Fprintf(&out, " -%s=%s", f.Name, f.Value)
	})
	return out.String()
}

func render(rs []result) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Measured %s on %d cores (%s), %s, with `go run ./test/bench%s`.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), cpuModel(), runtime.Version(), effectiveFlags())
	fmt.Fprintf(&b, "| datastore | cold start to /readyz | warm start | idle RSS | creates/s (%d clients) | create p50 | create p99 | RSS after creates |\n", *clients)
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f MiB | %.0f | %s | %s | %.0f MiB |\n", r.datastore,
			r.coldStart.Round(10*time.Millisecond), r.warmStart.Round(10*time.Millisecond), r.idleRSSMiB,
			r.createsPerSec, r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.rssAfterMiB)
	}
	return b.String()
}

func renderWorkspaces(rs []wsResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nWorkspace creation (%d concurrent clients; a workspace counts when its status is Ready):\n\n", *clients)
	fmt.Fprintf(&b, "| datastore | shape | workspaces | ready workspaces/s | server CPU per workspace | RSS before -> after | RSS per workspace | live heap before -> after | live heap per workspace | goroutines before -> after |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		per, rss, heap, heapPer, gor := "", "", "", "", ""
		if r.rssAfter > 0 {
			per = fmt.Sprintf("%.1f KiB", (r.rssAfter-r.rssBefore)*1024/float64(r.count))
			rss = fmt.Sprintf("%.0f -> %.0f MiB", r.rssBefore, r.rssAfter)
			gor = fmt.Sprintf("%d -> %d", r.gorBefore, r.gorAfter)
		}
		if r.heapAfter > 0 {
			heap = fmt.Sprintf("%.0f -> %.0f MiB", r.heapBefore, r.heapAfter)
			heapPer = fmt.Sprintf("%.1f KiB", (r.heapAfter-r.heapBefore)*1024/float64(r.count))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %.2f ms | %s | %s | %s | %s | %s |\n", r.datastore, r.shape, r.count, r.perSec, float64(r.cpuPerWs)/float64(time.Millisecond), rss, per, heap, heapPer, gor)
	}
	return b.String()
}

func renderLatency(rs []latencyResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nWatch latency, from a create returning to the event on a watch (%d sequential writes):\n\n", rs[0].samples)
	fmt.Fprintf(&b, "| setup | p50 | p99 |\n|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.setup, r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond))
	}
	return b.String()
}

const startMark, endMark = "<!-- bench:start -->", "<!-- bench:end -->"

func replaceSection(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, startMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section", path, startMark, endMark)
	}
	s = s[:i+len(startMark)] + "\n" + table + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
