package clusterapf

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"

	"github.com/kcpsql/kcp/server/tenantslots"
)

// starting is an APF controller whose Handle runs execFn at once and
// counts, per tenant user, the watches executing (until execFn returns,
// which for a watch is when it has started).
type starting struct {
	utilflowcontrol.Interface
	mu      sync.Mutex
	now     map[string]int
	highest map[string]int
}

func (s *starting) Handle(ctx context.Context, rd utilflowcontrol.RequestDigest, _ func(*flowcontrolv1.FlowSchema, *flowcontrolv1.PriorityLevelConfiguration, string), _ func() fcrequest.WorkEstimate, _ fq.QueueNoteFn, execFn func()) {
	who := rd.User.GetName()
	s.mu.Lock()
	s.now[who]++
	s.highest[who] = max(s.highest[who], s.now[who])
	s.mu.Unlock()
	execFn()
	s.mu.Lock()
	s.now[who]--
	s.mu.Unlock()
}

// A tenant's watches start at most watchStarts at a time; another
// tenant's watch starts meanwhile, and a waiting watch whose client gives
// up is not run.
func TestWatchStartsPerTenant(t *testing.T) {
	root := &starting{now: map[string]int{}, highest: map[string]int{}}
	f := &FlowControl{Interface: root}
	f.watchStarts = tenantslots.New(3)
	watch := &apirequest.RequestInfo{IsResourceRequest: true, Verb: "watch", Resource: "configmaps"}
	rd := utilflowcontrol.RequestDigest{RequestInfo: watch, User: &user.DefaultInfo{Name: "alice"}}
	release := make(chan struct{})
	var started atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.inSlot(context.Background(), "root:a", rd, func() {
				root.Handle(context.Background(), utilflowcontrol.RequestDigest{RequestInfo: watch, User: &user.DefaultInfo{Name: "a"}}, nil, nil, nil, func() {
					started.Add(1)
					<-release // sending its initial objects
				})
			})
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for started.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Tenant b's watch is not behind a's.
	bDone := make(chan struct{})
	go f.inSlot(context.Background(), "root:b", rd, func() { close(bDone) })
	select {
	case <-bDone:
	case <-time.After(10 * time.Second):
		t.Fatal("tenant b's watch waited behind tenant a's")
	}
	// A waiting watch of a whose client goes away is not run.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	f.inSlot(ctx, "root:a", rd, func() { ran = true })
	if ran {
		t.Error("a cancelled waiting watch ran")
	}
	close(release)
	wg.Wait()
	if got := root.highest["a"]; got != 3 {
		t.Errorf("tenant a's watches starting at once: at most %d, want 3", got)
	}
	if started.Load() != 20 {
		t.Errorf("%d of 20 watches started", started.Load())
	}
}
