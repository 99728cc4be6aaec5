package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/physical"
)

var (
	streamsOnly    = flag.Bool("streams", false, "only measure pod streams through kcp (pull mode, the syncer's tunnel): time to the first log byte, exec round trip, port-forward throughput, and kcp's and the syncer's memory per open logs -f")
	streamSamples  = flag.Int("stream-samples", 100, "logs and execs to time for -streams")
	streamsOpen    = flag.Int("streams-open", 50, "logs -f streams held open at once for -streams' memory numbers (at most --pod-streams-per-workspace, 64 by default)")
	forwardedBytes = flag.Int("forward-mib", 16, "MiB sent through one port-forward (and echoed back) for -streams")
)

type streamsResult struct {
	firstLog, exec                 []time.Duration
	directLog, directExec          []time.Duration
	forwardMiBs                    float64
	heapBefore, heapOpen           float64
	syncerRSSBefore, syncerRSSOpen float64
	open                           int
}

// benchStreams: one physical cluster with its syncer (pull mode), a placed
// workspace running one pod, and its streams through kcp as kubectl makes
// them (client-go's log stream, websocket exec, SPDY port-forward).
func benchStreams(log func(string, ...any)) (streamsResult, error) {
	var r streamsResult
	bins, err := physical.EnsureBinaries(log)
	if err != nil {
		return r, err
	}
	tmp, err := os.MkdirTemp("", "kcp-bench-streams-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(tmp)
	ctx := context.Background()
	pc, err := physical.Start(ctx, bins, physical.Options{Name: "pc1", Dir: filepath.Join(tmp, "pc1"), Nodes: 1, Log: log})
	if err != nil {
		return r, err
	}
	defer pc.Stop()
	s := &server{dir: filepath.Join(tmp, "kcp"), port: freePort()}
	if _, err := s.start(); err != nil {
		return r, err
	}
	defer s.stop()
	if err := s.createWorkspaces([][2]string{{"root", "compute"}, {"root", "app"}}); err != nil {
		return r, err
	}
	kubeconfig, err := s.computeKubeconfig(tmp)
	if err != nil {
		return r, err
	}
	syncerConfig := filepath.Join(tmp, "pc1-syncer.kubeconfig")
	if err := plugin(kubeconfig, "workload", "sync", "pc1", "--labels", "region=eu", "--kcp-kubeconfig-out", syncerConfig); err != nil {
		return r, err
	}
	sy, err := startSyncer(tmp, "pc1", syncerConfig, pc.Kubeconfig, "--heartbeat-interval", "1s")
	if err != nil {
		return r, err
	}
	defer stopProcess(sy)
	compute, err := s.config("root:compute")
	if err != nil {
		return r, err
	}
	dyn, err := dynamic.NewForConfig(compute)
	if err != nil {
		return r, err
	}
	if err := pollFor(2*time.Minute, func() (bool, error) {
		obj, err := dyn.Resource(workload.SyncTargetsResource).Get(ctx, "pc1", metav1.GetOptions{})
		return err == nil && readyCondition(obj) == "True", nil
	}); err != nil {
		return r, fmt.Errorf("SyncTarget pc1 not Ready: %v", err)
	}
	if err := placeAndDeploy(s, "root:app", nil, 1); err != nil {
		return r, err
	}
	cfg, err := s.config("root:app")
	if err != nil {
		return r, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	var pod string
	if err := pollFor(2*time.Minute, func() (bool, error) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) == 0 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, nil
		}
		pod = pods.Items[0].Name
		return true, nil
	}); err != nil {
		return r, fmt.Errorf("no running pod projected into the workspace: %v", err)
	}
	log("pod %s runs; timing %d logs and execs", pod, *streamSamples)

	if r.firstLog, r.exec, err = timeStreams(ctx, cfg, c, "default", pod); err != nil {
		return r, err
	}
	// The same on the physical cluster directly, for comparison.
	downCfg, err := pc.RESTConfig()
	if err != nil {
		return r, err
	}
	down, err := kubernetes.NewForConfig(downCfg)
	if err != nil {
		return r, err
	}
	if r.directLog, r.directExec, err = timeStreams(ctx, downCfg, down, syncer.DownstreamNamespace("root:app", "default"), pod); err != nil {
		return r, fmt.Errorf("directly: %v", err)
	}

	// Port-forward: kwok's pods echo what they receive on any port.
	mib, err := forwardThroughput(cfg, c, pod, *forwardedBytes<<20)
	if err != nil {
		return r, fmt.Errorf("port-forward: %v", err)
	}
	r.forwardMiBs = mib
	log("port-forward: %.1f MiB/s echoed", mib)

	// Memory per open logs -f.
	time.Sleep(2 * time.Second)
	r.heapBefore, r.syncerRSSBefore = s.liveHeapMiB(), rssMiB(sy.Process.Pid)
	var open []io.ReadCloser
	defer func() {
		for _, rc := range open {
			rc.Close()
		}
	}()
	for i := 0; i < *streamsOpen; i++ {
		rc, err := c.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			return r, fmt.Errorf("logs -f %d: %v", i, err)
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(rc, b); err != nil {
			return r, err
		}
		open = append(open, rc)
	}
	time.Sleep(2 * time.Second)
	r.open = len(open)
	r.heapOpen, r.syncerRSSOpen = s.liveHeapMiB(), rssMiB(sy.Process.Pid)
	return r, nil
}

// timeStreams times first log bytes and exec round trips of one pod.
func timeStreams(ctx context.Context, cfg *rest.Config, c *kubernetes.Clientset, ns, pod string) (logs, execs []time.Duration, err error) {
	for i := 0; i < *streamSamples; i++ {
		t0 := time.Now()
		rc, err := c.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).Stream(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("logs: %v", err)
		}
		b := make([]byte, 1)
		_, err = io.ReadFull(rc, b)
		rc.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("logs: %v", err)
		}
		logs = append(logs, time.Since(t0))
	}
	execURL := c.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"echo", "x"}, Stdout: true}, scheme.ParameterCodec).URL()
	for i := 0; i < *streamSamples; i++ {
		ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", execURL.String())
		if err != nil {
			return nil, nil, err
		}
		var out bytes.Buffer
		t0 := time.Now()
		if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out}); err != nil {
			return nil, nil, fmt.Errorf("exec: %v", err)
		}
		execs = append(execs, time.Since(t0))
		if strings.TrimSpace(out.String()) != "x" {
			return nil, nil, fmt.Errorf("exec printed %q", out.String())
		}
	}
	return logs, execs, nil
}

// forwardThroughput sends n bytes through a port-forward to the pod's port
// 80 and reads them back, in MiB/s.
func forwardThroughput(cfg *rest.Config, c *kubernetes.Clientset, pod string, n int) (float64, error) {
	u := c.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return 0, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, "POST", u)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:80"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return 0, err
	}
	errs := make(chan error, 1)
	go func() { errs <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errs:
		return 0, err
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("port-forward not ready after 30s")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		return 0, fmt.Errorf("forwarded ports: %v", err)
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), n/16)
	t0 := time.Now()
	go func() { conn.Write(payload) }()
	got := make([]byte, len(payload))
	conn.SetReadDeadline(time.Now().Add(5 * time.Minute))
	if _, err := io.ReadFull(conn, got); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	if !bytes.Equal(got, payload) {
		return 0, fmt.Errorf("the echo differs from what was sent")
	}
	return float64(len(payload)) / (1 << 20) / took.Seconds(), nil
}

func renderStreams(r streamsResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| measure | samples | through kcp p50 | p99 | the physical cluster directly p50 | p99 |\n|---|---|---|---|---|---|\n")
	for _, m := range []struct {
		name        string
		kcp, direct []time.Duration
	}{{"logs: time to the first byte", r.firstLog, r.directLog}, {"exec echo: round trip (websocket)", r.exec, r.directExec}} {
		k, d := phase("", m.kcp, 0), phase("", m.direct, 0)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", m.name, k.n, k.p50.Round(10*time.Microsecond), k.p99.Round(10*time.Microsecond),
			d.p50.Round(10*time.Microsecond), d.p99.Round(10*time.Microsecond))
	}
	fmt.Fprintf(&b, "\nPort-forward: %.1f MiB/s (%d MiB sent and echoed back through kcp and the syncer's tunnel).\n", r.forwardMiBs, *forwardedBytes)
	fmt.Fprintf(&b, "\n%d logs -f open at once: kcp's live heap %.1f → %.1f MiB (%.1f KiB per stream), the syncer's RSS %.1f → %.1f MiB (%.1f KiB per stream).\n",
		r.open, r.heapBefore, r.heapOpen, (r.heapOpen-r.heapBefore)*1024/float64(max(r.open, 1)),
		r.syncerRSSBefore, r.syncerRSSOpen, (r.syncerRSSOpen-r.syncerRSSBefore)*1024/float64(max(r.open, 1)))
	return b.String()
}
