package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/test/physical"
)

var (
	compareOps    = flag.Int("compare-ops", 2000, "objects per operation in the side-by-side run against upstream kube-apiserver; 0 skips it")
	compareRounds = flag.Int("compare-rounds", 3, "rounds of the side-by-side run; the table shows each system's median round per operation")
	kasBin        = flag.String("kube-apiserver", "", "upstream kube-apiserver binary (default: built once from the pinned k8s.io/kubernetes into ~/.cache/kcp-bench)")
	etcdBin       = flag.String("etcd", "etcd", "etcd binary for the kube-apiserver on etcd run (Debian: apt-get install etcd-server); '' skips it")
)

// profiled is the system under measurement in the side-by-side steps: pids
// are its processes (API server and datastore), whose CPU time is counted
// per operation; with -profile-dir, the server behind client is
// CPU-profiled as compare-<name>-<op>-<round>.pprof.
type profiled struct {
	client kubernetes.Interface
	pids   []int
	name   string
	round  int
	log    func(string, ...any)
}

// start begins a CPU profile of op (create and update only) if
// -profile-dir is set and returns a function that waits for it.
func (p *profiled) start(op string) func() {
	if op != "create" && op != "update" {
		return func() {}
	}
	return cpuProfile(p.client, fmt.Sprintf("compare-%s-%s-%d.pprof", p.name, op, p.round), p.name+" "+op, p.log)
}

type opResult struct {
	op       string
	perSec   float64
	p50, p99 time.Duration
	// cpuPerOp is the CPU time the system's processes (API server and
	// datastore; not the benchmark's clients) spent per operation.
	cpuPerOp time.Duration
}

type compareResult struct {
	system string
	ops    []opResult
}

// target is where one client works: a cluster (kcp) or a namespace.
type target struct {
	client    kubernetes.Interface
	namespace string
}

// runOps creates, gets, updates and lists config maps with `clients`
// concurrent clients spread over the targets.
func runOps(targets []target, n int, prof *profiled) ([]opResult, error) {
	ctx := context.Background()
	run := func(op string, count int, f func(i int) error) (opResult, error) {
		lat := make([]time.Duration, count)
		profiling := prof.start(op)
		cpu0 := cpuTime(prof.pids...)
		t0 := time.Now()
		err := parallel(count, func(i int) error {
			t := time.Now()
			err := f(i)
			lat[i] = time.Since(t)
			return err
		})
		elapsed := time.Since(t0)
		cpu := cpuTime(prof.pids...) - cpu0
		profiling()
		if err != nil {
			return opResult{}, fmt.Errorf("%s: %v", op, err)
		}
		return opResult{op: op, perSec: float64(count) / elapsed.Seconds(), p50: percentile(lat, 0.5), p99: percentile(lat, 0.99),
			cpuPerOp: cpu / time.Duration(count)}, nil
	}
	tg := func(i int) target { return targets[i%len(targets)] }
	name := func(i int) string { return fmt.Sprintf("cmp-%d", i) }
	var out []opResult
	for _, step := range []struct {
		op    string
		count int
		f     func(i int) error
	}{
		{"create", n, func(i int) error {
			_, err := tg(i).client.CoreV1().ConfigMaps(tg(i).namespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name(i)}, Data: map[string]string{"color": "blue"}}, metav1.CreateOptions{})
			return err
		}},
		{"get", n, func(i int) error {
			_, err := tg(i).client.CoreV1().ConfigMaps(tg(i).namespace).Get(ctx, name(i), metav1.GetOptions{})
			return err
		}},
		{"update", n, func(i int) error {
			_, err := tg(i).client.CoreV1().ConfigMaps(tg(i).namespace).Update(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name(i)}, Data: map[string]string{"color": "red"}}, metav1.UpdateOptions{})
			return err
		}},
		{fmt.Sprintf("list (%d per namespace)", n/len(targets)), 20 * len(targets), func(i int) error {
			_, err := tg(i).client.CoreV1().ConfigMaps(tg(i).namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
	} {
		r, err := run(step.op, step.count, step.f)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ensureBuilt builds a main package into the shared cache (test/physical).
func ensureBuilt(name, pkg string, log func(string, ...any)) (string, error) {
	return physical.Build(name, pkg, log)
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(logPath string, bin string, args ...string) (*proc, *bufio.Reader, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	return p, bufio.NewReader(stdout), nil
}

func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// kubeAPIServer starts upstream kube-apiserver on the etcd endpoint and
// returns a config for it. Its client authenticates as kcp's admin.kubeconfig
// does (and kubeadm's admin.conf): a client certificate in system:masters,
// so both servers verify the same kind of credential on every request.
func kubeAPIServer(dir, endpoint string) (*proc, *rest.Config, error) {
	bin := *kasBin
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalECPrivateKey(key)
	keyFile := filepath.Join(dir, "sa.key")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
	caFile := filepath.Join(dir, "client-ca.crt")
	certPEM, keyPEM, err := adminClientCert(caFile)
	if err != nil {
		return nil, nil, err
	}
	port := freePort()
	p, _, err := startProc(filepath.Join(dir, "kube-apiserver.log"), bin,
		"--etcd-servers="+endpoint, "--secure-port="+fmt.Sprint(port), "--bind-address=127.0.0.1",
		"--cert-dir="+filepath.Join(dir, "certs"), "--client-ca-file="+caFile,
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile, "--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC")
	if err != nil {
		return nil, nil, err
	}
	cfg := &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", port),
		TLSClientConfig: rest.TLSClientConfig{Insecure: true, CertData: certPEM, KeyData: keyPEM}, QPS: -1}
	c, _ := kubernetes.NewForConfig(cfg)
	for t0 := time.Now(); time.Since(t0) < 2*time.Minute; time.Sleep(100 * time.Millisecond) {
		select {
		case <-p.done:
			return nil, nil, fmt.Errorf("kube-apiserver exited; see %s", filepath.Join(dir, "kube-apiserver.log"))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil {
			return p, cfg, nil
		}
	}
	p.stop()
	return nil, nil, fmt.Errorf("kube-apiserver not ready after 2 minutes")
}

// adminClientCert writes a new client CA to caFile and returns a client
// certificate and key it signed for an admin in system:masters.
func adminClientCert(caFile string) (certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench-client-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "bench-admin", Organization: []string{"system:masters"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// namespaceTargets creates 16 namespaces (one per client) on one cluster.
func namespaceTargets(cfg *rest.Config) ([]target, error) {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var out []target
	for i := range *clients {
		ns := fmt.Sprintf("bench-%d", i)
		if _, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		out = append(out, target{client: c, namespace: ns})
	}
	// Let the namespace informers of admission see them.
	time.Sleep(2 * time.Second)
	return out, nil
}

// benchCompare runs compareRound -compare-rounds times and reports, for
// every system and operation, the round with the median rate: on a shared
// 2-core machine one round can be off by a third, and the systems run one
// after the other, so a disturbance would otherwise favour one of them.
func benchCompare(log func(string, ...any)) ([]compareResult, error) {
	var rounds [][]compareResult
	n := max(1, *compareRounds)
	for i := range n {
		log("side by side, round %d of %d", i+1, n)
		r, err := compareRound(i+1, log)
		if err != nil {
			return nil, err
		}
		rounds = append(rounds, r)
	}
	out := make([]compareResult, len(rounds[0]))
	for si := range rounds[0] {
		out[si].system = rounds[0][si].system
		for oi := range rounds[0][si].ops {
			var all []opResult
			for _, r := range rounds {
				if si < len(r) && oi < len(r[si].ops) {
					all = append(all, r[si].ops[oi])
				}
			}
			sort.Slice(all, func(a, b int) bool { return all[a].perSec < all[b].perSec })
			out[si].ops = append(out[si].ops, all[len(all)/2])
		}
	}
	return out, nil
}

// compareRound runs the same operations against kcp (SQLite, one cluster
// per client), upstream kube-apiserver on the same kine/SQLite, and
// upstream kube-apiserver on etcd (one namespace per client).
func compareRound(round int, log func(string, ...any)) ([]compareResult, error) {
	n := *compareOps
	tmp, err := os.MkdirTemp("", "kcp-bench-compare-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var out []compareResult

	// kcp
	s := &server{dir: filepath.Join(tmp, "kcp"), port: freePort()}
	if _, err := s.start(); err != nil {
		return nil, err
	}
	var pairs [][2]string
	for i := range *clients {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("bench-%d", i)})
	}
	if err := s.createWorkspaces(pairs); err != nil {
		s.stop()
		return nil, err
	}
	var targets []target
	for i := range *clients {
		c, err := s.client(fmt.Sprintf("root:bench-%d", i))
		if err != nil {
			s.stop()
			return nil, err
		}
		targets = append(targets, target{client: c, namespace: "default"})
	}
	root, err := s.client("root")
	if err != nil {
		s.stop()
		return nil, err
	}
	ops, err := runOps(targets, n, &profiled{client: root, pids: []int{s.cmd.Process.Pid}, name: "kcp", round: round, log: log})
	s.stop()
	if err != nil {
		return nil, fmt.Errorf("kcp: %v", err)
	}
	out = append(out, compareResult{system: "kcp, SQLite (one logical cluster per client)", ops: ops})
	log("kcp: %+v", ops)

	if *kasBin == "" {
		if *kasBin, err = ensureBuilt("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", log); err != nil {
			return nil, err
		}
	}
	kineBin, err := ensureBuilt("kineserver", "./test/bench/kineserver", log)
	if err != nil {
		return nil, err
	}

	// kube-apiserver on kine/SQLite (the same embedded kine and schema as kcp).
	kdir := filepath.Join(tmp, "kine")
	os.MkdirAll(kdir, 0o700)
	kp, stdout, err := startProc(filepath.Join(tmp, "kine.log"), kineBin, "-dir", kdir)
	if err != nil {
		return nil, err
	}
	line, err := stdout.ReadString('\n')
	if err != nil {
		kp.stop()
		return nil, fmt.Errorf("kineserver: %v", err)
	}
	res, err := measureKAS(filepath.Join(tmp, "kas-kine"), strings.TrimSpace(line), n, profiled{pids: []int{kp.cmd.Process.Pid}, name: "kas-kine", round: round, log: log})
	kp.stop()
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver on kine: %v", err)
	}
	out = append(out, compareResult{system: "kube-apiserver, kine/SQLite (one namespace per client)", ops: res})
	log("kube-apiserver on kine: %+v", res)

	if *etcdBin != "" {
		if _, err := exec.LookPath(*etcdBin); err != nil {
			log("etcd not found (%v): skipping kube-apiserver on etcd; apt-get install etcd-server", err)
			return out, nil
		}
		cport, pport := freePort(), freePort()
		ep, _, err := startProc(filepath.Join(tmp, "etcd.log"), *etcdBin, "--data-dir", filepath.Join(tmp, "etcd"),
			"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", cport), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", cport),
			"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", pport), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", pport),
			"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", pport))
		if err != nil {
			return nil, err
		}
		res, err := measureKAS(filepath.Join(tmp, "kas-etcd"), fmt.Sprintf("http://127.0.0.1:%d", cport), n, profiled{pids: []int{ep.cmd.Process.Pid}, name: "kas-etcd", round: round, log: log})
		ep.stop()
		if err != nil {
			return nil, fmt.Errorf("kube-apiserver on etcd: %v", err)
		}
		out = append(out, compareResult{system: "kube-apiserver, etcd (one namespace per client)", ops: res})
		log("kube-apiserver on etcd: %+v", res)
	}
	return out, nil
}

func measureKAS(dir, endpoint string, n int, prof profiled) ([]opResult, error) {
	p, cfg, err := kubeAPIServer(dir, endpoint)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	targets, err := namespaceTargets(cfg)
	if err != nil {
		return nil, err
	}
	prof.client = targets[0].client
	prof.pids = append(prof.pids, p.cmd.Process.Pid)
	return runOps(targets, n, &prof)
}

// cpuTime is the CPU time (user and system) the processes have used so far.
func cpuTime(pids ...int) time.Duration {
	var sec float64
	for _, pid := range pids {
		sec += cpuSeconds(pid)
	}
	return time.Duration(sec * float64(time.Second))
}

func etcdVersion() string {
	out, err := exec.Command(*etcdBin, "--version").Output()
	if err != nil {
		return "?"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

func renderCompare(rs []compareResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nSide by side: %d config maps created, read, updated, then listed, by %d concurrent clients; upstream kube-apiserver v1.37.2 built from the pinned module with its defaults (watch cache on, protobuf storage); etcd: %s. The systems run one after the other, %d rounds; each row is the system's median round for that operation:\n\n", *compareOps, *clients, etcdVersion(), max(1, *compareRounds))
	fmt.Fprintf(&b, "| system | operation | ops/s | p50 | p99 | server + datastore CPU per op | kcp ops/s as a ratio of this |\n|---|---|---|---|---|---|---|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	for _, r := range rs {
		for i, op := range r.ops {
			ratio := ""
			if len(rs[0].ops) > i && op.perSec > 0 {
				ratio = fmt.Sprintf("%.2f", rs[0].ops[i].perSec/op.perSec)
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | %s |\n", r.system, op.op, op.perSec, ms(op.p50), ms(op.p99), ms(op.cpuPerOp), ratio)
		}
	}
	return b.String()
}
