package multicluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestPodStreamsPushMode: the pod streams of TestPodStreams where kcp runs
// the syncer itself (push mode) and reaches the physical cluster with its
// own connection, not a syncer's tunnel: two workspaces with a pod web in
// namespace default on one physical cluster; logs, exec (websocket, SPDY,
// stdin), port-forward and attach reach each workspace's own pod, and a
// workspace at its cap of open streams gets 429 while the other's go on.
func TestPodStreamsPushMode(t *testing.T) {
	bins := binaries(t)
	s := framework.StartServer(t, "", "--push-mode", "--webhook-allowed-networks=127.0.0.0/8", "--pod-streams-per-workspace=3")
	const compute, teamA, teamB = "root:compute", "root:push-a", "root:push-b"
	s.CreateWorkspaces(compute, teamA, teamB)
	pcs := startPhysical(t, bins, "pc1")
	pc1 := pcs["pc1"]
	registerPush(t, s, compute, "pc1", "eu", pc1, "")
	waitTargetsReady(t, s, compute, "pc1")
	ctx := context.Background()
	own := map[string]string{teamA: "push team A's log line", teamB: "push team B's log line"}
	for _, team := range []string{teamA, teamB} {
		placeAll(t, s, team, compute, "pc1")
		framework.MustContain(t, "kubectl run", s.Kubectl(team, "run", "web", "--image=nginx"), "pod/web created")
		if out, err := s.KubectlErr(team, "", "wait", "--for=condition=Ready", "pod/web", "--timeout=60s"); err != nil {
			t.Fatalf("%s: wait for pod/web: %v\n%s", team, err, out)
		}
		if _, err := pc1.SetPodLogs(ctx, syncer.DownstreamNamespace(logicalcluster.Name(team), "default"), "web", own[team]); err != nil {
			t.Fatal(err)
		}
	}
	for _, team := range []string{teamA, teamB} {
		framework.Eventually(t, 30*time.Second, team+": kubectl logs web", func() (bool, string) {
			out, err := s.KubectlErr(team, "", "logs", "web")
			return err == nil && strings.TrimSpace(out) == own[team], out
		})
	}
	t.Run("exec websocket and SPDY", func(t *testing.T) { testExecRows(t, s, teamA) })
	t.Run("port-forward", func(t *testing.T) { testPortForwardRow(t, s, teamA) })
	t.Run("attach", func(t *testing.T) { testAttachRow(t, s, teamA, pc1) })
	t.Run("a workspace's streams are capped, the others' are not", func(t *testing.T) { testStreamCapRow(t, s, teamA, teamB, own) })
}
