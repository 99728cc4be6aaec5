package resourcequota

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kcpsql/kcp/server/controllers/worker"
)

// A quota being charged is not counted until its charges stop: a count
// taken between a charge and the create it paid for would refund the
// create.
func TestCountWaitsForChargesToStop(t *testing.T) {
	c := &Controller{queue: worker.NewQueue[string]("test"), lastCharge: map[string]time.Time{}, waitingSince: map[string]time.Time{}}
	defer c.queue.ShutDown()
	const k = "root:a/ns/q"
	if d := c.untilQuiet(k); d != 0 {
		t.Fatalf("a quota never charged waits %v", d)
	}
	c.charged(k)
	if d := c.untilQuiet(k); d <= RecountAfterCharge/2 || d > RecountAfterCharge {
		t.Fatalf("right after a charge the count waits %v, want about %v", d, RecountAfterCharge)
	}
	// A charge 9 s ago and another now: the count waits for the later.
	c.mu.Lock()
	c.lastCharge[k] = time.Now().Add(-RecountAfterCharge + time.Second)
	c.mu.Unlock()
	if d := c.untilQuiet(k); d <= 0 || d > time.Second {
		t.Fatalf("a second before the quiet period ends the count waits %v", d)
	}
	c.charged(k)
	if d := c.untilQuiet(k); d <= time.Second {
		t.Fatalf("a later charge did not push the count back: waits %v", d)
	}
	c.mu.Lock()
	c.lastCharge[k] = time.Now().Add(-RecountAfterCharge - time.Second)
	c.mu.Unlock()
	if d := c.untilQuiet(k); d != 0 {
		t.Fatalf("after the quiet period the count still waits %v", d)
	}
	if len(c.lastCharge) != 0 || len(c.waitingSince) != 0 {
		t.Errorf("the charge time is kept after the count: %v %v", c.lastCharge, c.waitingSince)
	}

	// Charges that never stop put the count off for MaxCountDelay at most:
	// deletions in a namespace created into steadily are still refunded.
	c.charged(k)
	if d := c.untilQuiet(k); d <= 0 {
		t.Fatal("a charge did not put the count off")
	}
	c.mu.Lock()
	c.waitingSince[k] = time.Now().Add(-MaxCountDelay + 2*time.Second)
	c.mu.Unlock()
	c.charged(k)
	if d := c.untilQuiet(k); d <= 0 || d > 2*time.Second {
		t.Fatalf("two seconds before the bound the count waits %v", d)
	}
	c.mu.Lock()
	c.waitingSince[k] = time.Now().Add(-MaxCountDelay - time.Second)
	c.mu.Unlock()
	c.charged(k)
	if d := c.untilQuiet(k); d != 0 {
		t.Fatalf("charges every moment put the count off past MaxCountDelay: waits %v", d)
	}
}

func TestLowers(t *testing.T) {
	rl := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		was, next corev1.ResourceList
		want      bool
	}{
		{rl("count/configmaps", "186"), rl("count/configmaps", "176"), true},
		{rl("count/configmaps", "176"), rl("count/configmaps", "186"), false},
		{rl("count/configmaps", "5", "pods", "2"), rl("count/configmaps", "6", "pods", "1"), true},
		{rl("requests.cpu", "1"), rl("requests.cpu", "1000m"), false},
		{rl(), rl("pods", "1"), false},
		{rl("pods", "1"), rl(), false}, // no longer limited: nothing counted lower
	} {
		if got := lowers(tc.was, tc.next); got != tc.want {
			t.Errorf("lowers(%v, %v) = %v, want %v", tc.was, tc.next, got, tc.want)
		}
	}
}
