package multicluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// TestPodStreams is issue 52's debugging story in pull mode: two teams
// place their workspaces on the same physical cluster and run a pod of the
// same name in the same namespace; in each workspace kubectl logs (also
// --previous and -f), exec (websocket and SPDY), exec with stdin and
// port-forward reach that workspace's pod, and nobody else's. Security
// rows: workspace B never sees A's logs; a user without pods/exec is
// refused by kcp; the downstream namespace is not a name in the workspace;
// the syncer's tunnel handler refuses anything but its pods' streams; a
// syncer credential opens only its own target's tunnel; a workspace at its
// cap of open streams gets 429 while another's streams go on. attach and
// cp out of the pod work too. Faults: the syncer killed during logs -f ends the
// client's stream; without a tunnel kcp answers 503 naming the SyncTarget;
// kcp restarted during logs -f ends it too, and logs work again once the
// tunnel is back; the physical cluster killed mid-exec ends the exec with
// an error, not a hang.
func TestPodStreams(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--pod-streams-per-workspace=3")
	const compute, teamA, teamB = "root:compute", "root:team-a", "root:team-b"
	s.CreateWorkspaces(compute, teamA, teamB)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	pc1 := pcs["pc1"]
	sp := register(t, s, admin, "pc1", "region=eu", pc1)
	waitTargetsReady(t, s, compute, "pc1")
	for _, team := range []string{teamA, teamB} {
		s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: eu}
spec:
  locationWorkspace: `+compute+`
  locationSelector: {matchLabels: {region: eu}}
  namespaceSelector: {}
`))
	}
	ctx := context.Background()
	own := map[string]string{teamA: "team A's own log line", teamB: "team B's own log line"}
	logFiles := map[string]string{}
	for _, team := range []string{teamA, teamB} {
		framework.Eventually(t, 60*time.Second, team+": default placed on pc1", func() (bool, string) {
			a := s.Kubectl(team, "get", "namespace", "default", "-o", `jsonpath={.metadata.annotations.workload\.kcp\.io/sync-target}`)
			return a == compute+"/pc1", a
		})
		framework.MustContain(t, "kubectl run", s.Kubectl(team, "run", "web", "--image=nginx"), "pod/web created")
		if out, err := s.KubectlErr(team, "", "wait", "--for=condition=Ready", "pod/web", "--timeout=60s"); err != nil {
			t.Fatalf("%s: wait for pod/web: %v\n%s", team, err, out)
		}
		f, err := pc1.SetPodLogs(ctx, syncer.DownstreamNamespace(logicalcluster.Name(team), "default"), "web", own[team])
		if err != nil {
			t.Fatal(err)
		}
		logFiles[team] = f
	}

	// Logs: each workspace its own pod's.
	for _, team := range []string{teamA, teamB} {
		framework.Eventually(t, 30*time.Second, team+": kubectl logs web", func() (bool, string) {
			out, err := s.KubectlErr(team, "", "logs", "web")
			return err == nil && strings.TrimSpace(out) == own[team], out
		})
	}
	for _, team := range []string{teamA, teamB} {
		if out := s.Kubectl(team, "logs", "web", "--previous"); strings.TrimSpace(out) != "previous "+own[team] {
			t.Errorf("%s: kubectl logs --previous: %q", team, out)
		}
	}

	t.Run("exec websocket and SPDY", func(t *testing.T) { testExecRows(t, s, teamA) })

	t.Run("port-forward", func(t *testing.T) { testPortForwardRow(t, s, teamA) })

	t.Run("a user without pods/exec is refused by kcp", func(t *testing.T) {
		// get on pods/exec and pods/portforward, not create: a websocket
		// upgrade is a GET, but running something in a pod needs create.
		s.Kubectl(teamA, "create", "role", "logs-only", "--verb=get,list", "--resource=pods,pods/log,pods/exec,pods/portforward")
		s.Kubectl(teamA, "create", "rolebinding", "eve-logs", "--role=logs-only", "--user=eve")
		s.Kubectl("root", "create", "clusterrole", "access-team-a", "--verb=access", "--resource=workspaces/content", "--resource-name=team-a")
		s.Kubectl("root", "create", "clusterrolebinding", "access-team-a", "--clusterrole=access-team-a", "--user=eve")
		eve := userKubeconfig(t, s, teamA, "eve")
		framework.Eventually(t, 30*time.Second, "eve reads logs", func() (bool, string) {
			out, err := kubectlAs(t, eve, "", "logs", "web")
			return err == nil && strings.TrimSpace(out) == own[teamA], out
		})
		out, err := kubectlAs(t, eve, "", "exec", "web", "--", "echo", "should not run")
		if err == nil || strings.Contains(out, "should not run") || !strings.Contains(out, "forbidden") {
			t.Errorf("eve's exec: %v %s", err, out)
		}
		out, err = kubectlAs(t, eve, "", "port-forward", "pod/web", ":80")
		if err == nil || !strings.Contains(out, "forbidden") {
			t.Errorf("eve's port-forward: %v %s", err, out)
		}
	})

	t.Run("the downstream namespace is no name in the workspace", func(t *testing.T) {
		dns := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default")
		out, err := s.KubectlErr(teamA, "", "logs", "-n", dns, "web")
		if err == nil || !strings.Contains(out, "NotFound") && !strings.Contains(out, "not found") {
			t.Errorf("logs in the downstream namespace: %v %s", err, out)
		}
		if strings.Contains(out, own[teamA]) {
			t.Errorf("the downstream namespace's pod logs came through: %s", out)
		}
	})

	t.Run("the tunnel handler forwards its pods' streams only", func(t *testing.T) {
		srv := tunnelServer(t, pc1, compute, "pc1")
		dns := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default")
		for _, c := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/api/v1/namespaces/" + dns + "/pods/web/log", http.StatusOK},
			{"GET", "/api/v1/secrets", http.StatusForbidden},
			{"GET", "/api/v1/namespaces/" + dns + "/secrets", http.StatusForbidden},
			{"GET", "/api/v1/namespaces/" + dns + "/pods/web", http.StatusForbidden},
			{"DELETE", "/api/v1/namespaces/" + dns + "/pods/web/log", http.StatusForbidden},
			{"POST", "/api/v1/namespaces/" + dns + "/pods/web/log", http.StatusForbidden},
			{"GET", "/api/v1/namespaces/kube-system/pods/kube-apiserver/log", http.StatusForbidden},
			{"GET", "/api/v1/namespaces/default/pods/web/log", http.StatusForbidden},
			{"GET", "/api/v1/namespaces/" + dns + "/pods/web/proxy", http.StatusForbidden},
			{"GET", "/api/v1/namespaces/" + dns + "/pods/web/log/../../../../secrets", http.StatusForbidden},
			{"GET", "/apis/apps/v1/namespaces/" + dns + "/deployments", http.StatusForbidden},
		} {
			code, body := tunnelRequest(t, srv, c.method, c.path)
			if code != c.want {
				t.Errorf("%s %s through the tunnel: %d %s, want %d", c.method, c.path, code, body, c.want)
			}
		}
	})

	t.Run("a syncer credential opens its own target's tunnel only", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "pc2-syncer.kubeconfig")
		if out, err := s.KubectlPlugin(admin, "kcp", "workload", "sync", "pc2", "--kcp-kubeconfig-out", other, "--labels", "region=us"); err != nil {
			t.Fatalf("kubectl kcp workload sync pc2: %v\n%s", err, out)
		}
		c, location := syncerClient(t, sp.kubeconfig)
		// An upgrade is HTTP/1.1.
		cfg, err := clientcmd.BuildConfigFromFlags("", sp.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		tlsConfig, err := rest.TLSConfigFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := rest.HTTPWrappersForConfig(cfg, &http.Transport{TLSClientConfig: tlsConfig})
		if err != nil {
			t.Fatal(err)
		}
		c.client = &http.Client{Transport: rt}
		for _, tc := range []struct {
			path string
			want int
		}{
			{syncer.TunnelPrefix + location + "/pc2", http.StatusForbidden},
			// Its token is a service account's of the location: in
			// another workspace it authenticates nobody.
			{syncer.TunnelPrefix + teamA + "/pc1", http.StatusUnauthorized},
			{syncer.TunnelPrefix + location + "/pc1/extra", http.StatusNotFound},
		} {
			req, _ := http.NewRequest("GET", c.base+tc.path, nil)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", syncer.TunnelProtocol)
			resp, err := c.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("pc1's credential at %s: %d %s, want %d", tc.path, resp.StatusCode, body, tc.want)
			}
		}
	})

	t.Run("the syncer killed during logs -f ends the stream", func(t *testing.T) {
		_, kubectl := framework.Binaries(t)
		cmd := exec.Command(kubectl, "--kubeconfig", s.Kubeconfig, "--server", s.URL()+"/clusters/"+teamA, "logs", "-f", "web")
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		defer cmd.Process.Kill()
		waitLine := func(want string) {
			t.Helper()
			deadline := time.After(60 * time.Second)
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("logs -f ended before %q", want)
					}
					if l == want {
						return
					}
				case <-deadline:
					t.Fatalf("logs -f did not show %q", want)
				}
			}
		}
		waitLine(own[teamA])
		if err := physical.AppendPodLog(logFiles[teamA], "a line written later"); err != nil {
			t.Fatal(err)
		}
		waitLine("a line written later")
		sp.stop()
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			t.Fatal("kubectl logs -f still hangs two minutes after the syncer died")
		}
		// No tunnel: 503 naming the SyncTarget.
		out, err := s.KubectlErr(teamA, "", "logs", "web")
		if err == nil || !strings.Contains(out, "SyncTarget pc1") {
			t.Errorf("logs without a tunnel: %v %s", err, out)
		}
		sp.start()
		framework.Eventually(t, 60*time.Second, "logs again once the syncer is back", func() (bool, string) {
			out, err := s.KubectlErr(teamA, "", "logs", "web")
			return err == nil && strings.Contains(out, "a line written later"), out
		})
	})

	t.Run("attach", func(t *testing.T) { testAttachRow(t, s, teamA, pc1) })

	t.Run("cp out of the pod", func(t *testing.T) {
		// tar through exec (kwok runs it in the cluster's directory on this
		// machine). cp into a pod is not tested: it needs the end of stdin,
		// which kwok's local exec does not pass on (on the physical cluster
		// directly too).
		if err := os.WriteFile(filepath.Join(pc1.Dir, "from-the-pod.txt"), []byte("inside pod web\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		local := filepath.Join(t.TempDir(), "copied.txt")
		if out, err := s.KubectlErr(teamA, "", "cp", "web:from-the-pod.txt", local); err != nil {
			t.Fatalf("kubectl cp out of the pod: %v\n%s", err, out)
		}
		if b, err := os.ReadFile(local); err != nil || string(b) != "inside pod web\n" {
			t.Errorf("copied out of the pod: %q %v", b, err)
		}
	})

	t.Run("a workspace's streams are capped, the others' are not", func(t *testing.T) { testStreamCapRow(t, s, teamA, teamB, own) })

	t.Run("kcp restarted during logs -f ends the stream", func(t *testing.T) {
		_, kubectl := framework.Binaries(t)
		cmd := exec.Command(kubectl, "--kubeconfig", s.Kubeconfig, "--server", s.URL()+"/clusters/"+teamA, "logs", "-f", "web")
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		first := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stdout)
			once := false
			for sc.Scan() {
				if !once && strings.Contains(sc.Text(), own[teamA]) {
					once = true
					close(first)
				}
			}
		}()
		select {
		case <-first:
		case <-time.After(60 * time.Second):
			t.Fatal("logs -f showed nothing")
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stopped := time.Now()
		s.Stop()
		// The framework kills kcp after 60 s of graceful shutdown: an open
		// stream must not hold the shutdown that long.
		if took := time.Since(stopped); took > 45*time.Second {
			t.Errorf("kcp took %s to stop gracefully with a logs -f open", took.Round(time.Second))
		}
		select {
		case <-exited:
			t.Logf("kubectl logs -f ended %s after kcp was told to stop", time.Since(stopped).Round(time.Millisecond))
		case <-time.After(time.Minute):
			t.Fatal("kubectl logs -f still hangs a minute after kcp stopped")
		}
		s.Start()
		restarted := time.Now()
		defer func() {
			t.Logf("logs worked again %s after kcp was ready", time.Since(restarted).Round(time.Millisecond))
		}()
		framework.Eventually(t, 90*time.Second, "logs again once kcp is back (the syncer's tunnel reconnects)", func() (bool, string) {
			out, err := s.KubectlErr(teamA, "", "logs", "web")
			return err == nil && strings.Contains(out, own[teamA]), out
		})
	})

	// Last: the physical cluster dies.
	t.Run("the physical cluster dies mid-exec", func(t *testing.T) {
		// The same exec through kcp and on the physical cluster directly:
		// when the cluster dies, both end, and kcp's ends as the direct one
		// does (an error where the physical cluster's own API gives one).
		_, kubectl := framework.Binaries(t)
		nsA := syncer.DownstreamNamespace(logicalcluster.Name(teamA), "default")
		start := func(args ...string) (chan error, func()) {
			cmd := exec.Command(kubectl, append(args, "exec", "-i", "web", "--", "sh", "-c", "echo started; sleep 3600")...)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if sc.Text() == "started" {
						close(started)
					}
				}
			}()
			select {
			case <-started:
			case <-time.After(60 * time.Second):
				t.Fatalf("exec %v did not start: %s", args, stderr.String())
			}
			exited := make(chan error, 1)
			go func() {
				err := cmd.Wait()
				if err != nil {
					err = fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
				}
				exited <- err
			}()
			return exited, func() { stdin.Close(); cmd.Process.Kill() }
		}
		viaKCP, stop1 := start("--kubeconfig", s.Kubeconfig, "--server", s.URL()+"/clusters/"+teamA)
		defer stop1()
		direct, stop2 := start("--kubeconfig", pc1.Kubeconfig, "-n", nsA)
		defer stop2()
		pc1.Kill()
		wait := func(what string, ch chan error) error {
			select {
			case err := <-ch:
				t.Logf("%s ended: %v", what, err)
				return err
			case <-time.After(2 * time.Minute):
				t.Fatalf("kubectl exec %s still hangs two minutes after its physical cluster died", what)
			}
			return nil
		}
		errKCP, errDirect := wait("through kcp", viaKCP), wait("on the physical cluster", direct)
		if (errKCP == nil) != (errDirect == nil) {
			t.Errorf("the exec through kcp ended with %v, on the physical cluster with %v", errKCP, errDirect)
		}
	})
}

// userKubeconfig writes a kubeconfig of one workspace for a user (client
// certificate signed by kcp's CA).
func userKubeconfig(t *testing.T, s *framework.Server, cluster, user string) string {
	t.Helper()
	return framework.UserKubeconfig(t, s, s.URL()+"/clusters/"+cluster, user)
}

// kubectlAs runs kubectl with a kubeconfig.
func kubectlAs(t *testing.T, kubeconfig, stdin string, args ...string) (string, error) {
	_, kubectl := framework.Binaries(t)
	cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "--request-timeout=60s"}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectlEnv runs kubectl as the admin of a workspace with more
// environment.
func kubectlEnv(t *testing.T, s *framework.Server, cluster, stdin string, env []string, args ...string) string {
	t.Helper()
	_, kubectl := framework.Binaries(t)
	cmd := exec.Command(kubectl, append([]string{"--kubeconfig", s.Kubeconfig, "--server", s.URL() + "/clusters/" + cluster}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}
