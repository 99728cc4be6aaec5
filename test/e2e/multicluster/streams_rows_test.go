package multicluster

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

// Rows of the pod streams tests run in pull mode (TestPodStreams, through
// the syncer's tunnel) and push mode (TestPodStreamsPushMode, kcp's own
// connection to the cluster). Each workspace runs a pod web.

func testExecRows(t *testing.T, s *framework.Server, teamA string) {
	out := s.Kubectl(teamA, "exec", "web", "--", "sh", "-c", "echo hello from $PHYSICAL_CLUSTER")
	if strings.TrimSpace(out) != "hello from pc1" {
		t.Errorf("kubectl exec (websocket): %q", out)
	}
	spdy := kubectlEnv(t, s, teamA, "", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"}, "exec", "web", "--", "sh", "-c", "echo spdy from $PHYSICAL_CLUSTER")
	if strings.TrimSpace(spdy) != "spdy from pc1" {
		t.Errorf("kubectl exec (SPDY): %q", spdy)
	}
	// head, not cat: kwok's local exec does not pass on the end of
	// stdin (cat waits forever, on the physical cluster directly too).
	in, err := s.KubectlErr(teamA, "ping through kcp\n", "exec", "-i", "web", "--", "head", "-n1")
	if err != nil || strings.TrimSpace(in) != "ping through kcp" {
		t.Errorf("kubectl exec -i head -n1: %v %q", err, in)
	}
}

func testPortForwardRow(t *testing.T, s *framework.Server, teamA string) {
	_, kubectl := framework.Binaries(t)
	cmd := exec.Command(kubectl, "--kubeconfig", s.Kubeconfig, "--server", s.URL()+"/clusters/"+teamA, "port-forward", "pod/web", ":80")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 80`)
		for sc.Scan() {
			t.Logf("port-forward: %s", sc.Text())
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
			}
		}
		close(port)
	}()
	p, ok := <-port
	if !ok {
		t.Fatal("kubectl port-forward did not forward")
	}
	conn, err := net.Dial("tcp", "127.0.0.1:"+p)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprint(conn, "echo through the tunnel\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "echo through the tunnel\n" {
		t.Errorf("port-forwarded echo: %q %v", line, err)
	}
}

func testAttachRow(t *testing.T, s *framework.Server, teamA string, pc1 *physical.Cluster) {
	// attach shows what the container writes from then on (kwok: what
	// is appended to the cluster's default log, its attach source).
	_, kubectl := framework.Binaries(t)
	cmd := exec.Command(kubectl, "--kubeconfig", s.Kubeconfig, "--server", s.URL()+"/clusters/"+teamA, "attach", "web")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "written while attached") {
				close(seen)
				return
			}
		}
	}()
	deadline := time.After(60 * time.Second)
	for {
		if err := physical.AppendPodLog(filepath.Join(pc1.Dir, "logs", "default.log"), "written while attached"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-seen:
			return
		case <-deadline:
			t.Fatal("kubectl attach did not show what the container wrote")
		case <-time.After(2 * time.Second):
		}
	}
}

func testStreamCapRow(t *testing.T, s *framework.Server, teamA, teamB string, own map[string]string) {
	_, kubectl := framework.Binaries(t)
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for i := 0; i < 3; i++ {
		c := exec.Command(kubectl, "--kubeconfig", s.Kubeconfig, "--server", s.URL()+"/clusters/"+teamA, "logs", "-f", "web")
		stdout, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		// Open (its first line read) before the next one starts.
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.Contains(line, own[teamA]) {
			t.Fatalf("logs -f %d: %q %v", i, line, err)
		}
	}
	out, err := s.KubectlErr(teamA, "", "logs", "web")
	if err == nil || !strings.Contains(out, "has 3 pod streams") || !strings.Contains(out, "--pod-streams-per-workspace") {
		t.Errorf("a 4th stream of team A: want 429 naming the cap, got %v\n%s", err, out)
	}
	if out, err := s.KubectlErr(teamB, "", "logs", "web"); err != nil || strings.TrimSpace(out) != own[teamB] {
		t.Errorf("team B while team A is at its cap: %v\n%s", err, out)
	}
}
