package podstreams

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

// TestStreamCaps: a workspace and a SyncTarget have at most their caps of
// streams open; beyond, 429 saying which cap and flag.
func TestStreamCaps(t *testing.T) {
	s := &Streams{tunnels: map[string]*yamux.Session{}, direct: map[string]*rest.Config{}, openWS: map[logicalcluster.Name]int{}, openTarget: map[string]int{}}
	s.SetLimits(Limits{PerWorkspace: 2, PerTarget: 3})
	pc1 := target{Key: "k1", Location: "root:compute", Name: "pc1"}
	a, b := logicalcluster.Name("root:a"), logicalcluster.Name("root:b")
	r1, err := s.acquire(a, pc1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire(a, pc1); err != nil {
		t.Fatal(err)
	}
	_, err = s.acquire(a, pc1)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "--pod-streams-per-workspace") {
		t.Errorf("third stream of a workspace: %v", err)
	}
	if _, err := s.acquire(b, pc1); err != nil {
		t.Errorf("another workspace: %v", err)
	}
	_, err = s.acquire(b, pc1)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "SyncTarget pc1") {
		t.Errorf("fourth stream of a target: %v", err)
	}
	r1()
	r1() // releasing twice counts once
	if _, err := s.acquire(b, pc1); err != nil {
		t.Errorf("after a release: %v", err)
	}
	if len(s.openWS) != 2 || s.openTarget["k1"] != 3 {
		t.Errorf("counts: %v %v", s.openWS, s.openTarget)
	}
}

// TestIdleTimeout: a connection nothing goes through is closed.
func TestIdleTimeout(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c2.Close()
	c := syncer.WithIdleTimeout(c1, 200*time.Millisecond)
	go func() { c2.Write([]byte("x")) }()
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(b); err == nil {
		t.Fatal("an idle connection stayed open")
	}
}
