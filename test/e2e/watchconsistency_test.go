package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWatchConsistency checks, as a controller author would, that a list's
// resourceVersion never runs ahead of what later watches deliver: writers
// update objects concurrently while observers list and then watch from the
// list's resourceVersion. Every acknowledged write at or below a list's
// resourceVersion must be in the list; every acknowledged write after it
// must be delivered by the watch, in order; and a watch from the first list
// replays every later write, the final state of every object included. On
// both dialects, for config maps read straight from the datastore (watch
// cache off) and for a custom resource; on PostgreSQL the observers use
// another replica than the writers.
func TestWatchConsistency(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d), "--watch-cache=false")
			cfg := s.Config("root")
			cfg.QPS, cfg.Burst = -1, 0
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			installWidgetCRD(t, s)
			// On PostgreSQL the observers use a second replica: writes of
			// one replica reach the other's watches through the database.
			observe := dyn
			if d == framework.Postgres {
				rcfg := framework.StartReplica(t, s).Config("root")
				rcfg.QPS, rcfg.Burst = -1, 0
				if observe, err = dynamic.NewForConfig(rcfg); err != nil {
					t.Fatal(err)
				}
			}
			resources := map[string]schema.GroupVersionResource{
				"configmaps": {Version: "v1", Resource: "configmaps"},
				"widgets":    {Group: "consistency.example.com", Version: "v1", Resource: "widgets"},
			}
			var wg sync.WaitGroup
			results := map[string]*consistencyRun{}
			for name, gvr := range resources {
				r := &consistencyRun{dyn: dyn, observe: observe, gvr: gvr, ns: "default", writers: 8, objects: 6, observers: 2, duration: 12 * time.Second}
				results[name] = r
				wg.Add(1)
				go func() { defer wg.Done(); r.run() }()
			}
			wg.Wait()
			for name, r := range results {
				t.Logf("%s: %d acknowledged writes, %d list+watch rounds, %d events checked", name, r.writes, r.rounds, r.events)
				if r.fatal != nil {
					t.Errorf("%s: %v", name, r.fatal)
				}
				if len(r.violations) > 0 {
					t.Errorf("%s: %d violations, first ones:\n%s", name, len(r.violations), strings.Join(r.violations[:min(10, len(r.violations))], "\n"))
				}
				if r.writes < 100 || r.rounds < 4 {
					t.Errorf("%s: too little traffic to check anything (%d writes, %d rounds)", name, r.writes, r.rounds)
				}
			}
		})
	}
}

func installWidgetCRD(t *testing.T, s *framework.Server) {
	t.Helper()
	out, err := s.KubectlErr("root", framework.NamespacedCRD("consistency.example.com", "widgets", "Widget",
		`{type: object, properties: {data: {type: object, x-kubernetes-preserve-unknown-fields: true}}}`), "apply", "-f", "-")
	if err != nil {
		t.Fatalf("installing the CRD: %v\n%s", err, out)
	}
	s.WaitEstablished("root", "crd/widgets.consistency.example.com")
}

type ackedWrite struct {
	name string
	rv   int64
}

type consistencyRun struct {
	dyn, observe                dynamic.Interface // writers', observers' clients
	gvr                         schema.GroupVersionResource
	ns                          string
	writers, objects, observers int
	duration                    time.Duration

	mu         sync.Mutex
	acked      map[string][]int64 // object -> resourceVersions its writer was given, ascending
	unsure     map[string]bool    // objects with a write whose outcome is unknown
	violations []string
	writes     int
	rounds     int
	events     int
	fatal      error
}

func rvOf(o *unstructured.Unstructured) int64 {
	v, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return v
}

func (r *consistencyRun) violate(format string, args ...any) {
	r.mu.Lock()
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *consistencyRun) object(name string, gen int) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"gen": strconv.Itoa(gen)}}}
	if r.gvr.Group == "" {
		o.SetAPIVersion("v1")
		o.SetKind("ConfigMap")
	} else {
		o.SetAPIVersion(r.gvr.Group + "/" + r.gvr.Version)
		o.SetKind("Widget")
	}
	o.SetName(name)
	return o
}

func (r *consistencyRun) run() {
	r.acked, r.unsure = map[string][]int64{}, map[string]bool{}
	client := r.dyn.Resource(r.gvr).Namespace(r.ns)
	observed := r.observe.Resource(r.gvr).Namespace(r.ns)
	ctx := context.Background()
	prefix := "c-" + r.gvr.Resource + "-"

	// The first list: the watch from its resourceVersion must replay all.
	first, err := observed.List(ctx, metav1.ListOptions{})
	if err != nil {
		r.fatal = err
		return
	}
	firstRV, _ := strconv.ParseInt(first.GetResourceVersion(), 10, 64)

	stop := make(chan struct{})
	var writers, observers sync.WaitGroup
	for w := 0; w < r.writers; w++ {
		writers.Add(1)
		go func(w int) {
			defer writers.Done()
			names := make([]string, r.objects)
			current := make([]*unstructured.Unstructured, r.objects)
			for i := range names {
				names[i] = fmt.Sprintf("%s%d-%d", prefix, w, i)
			}
			for gen := 0; ; gen++ {
				select {
				case <-stop:
					return
				default:
				}
				i := gen % r.objects
				var out *unstructured.Unstructured
				var err error
				if current[i] == nil {
					out, err = client.Create(ctx, r.object(names[i], gen), metav1.CreateOptions{})
				} else {
					o := r.object(names[i], gen)
					o.SetResourceVersion(current[i].GetResourceVersion())
					out, err = client.Update(ctx, o, metav1.UpdateOptions{})
				}
				r.mu.Lock()
				if err != nil {
					r.unsure[names[i]] = true
					r.mu.Unlock()
					if got, gerr := client.Get(ctx, names[i], metav1.GetOptions{}); gerr == nil {
						current[i] = got
					}
					continue
				}
				r.acked[names[i]] = append(r.acked[names[i]], rvOf(out))
				r.writes++
				r.mu.Unlock()
				current[i] = out
			}
		}(w)
	}
	for o := 0; o < r.observers; o++ {
		observers.Add(1)
		go func(o int) {
			defer observers.Done()
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				opts := metav1.ListOptions{}
				if round%2 == 1 {
					opts.ResourceVersion = "0"
				}
				list, err := observed.List(ctx, opts)
				if err != nil {
					r.violate("observer %d: list: %v", o, err)
					continue
				}
				listRV, _ := strconv.ParseInt(list.GetResourceVersion(), 10, 64)
				seen := map[string]int64{}
				for i := range list.Items {
					seen[list.Items[i].GetName()] = rvOf(&list.Items[i])
				}
				wctx, cancel := context.WithTimeout(ctx, time.Duration(500+300*(round%5))*time.Millisecond)
				events, err := watchEvents(wctx, observed, list.GetResourceVersion(), nil)
				cancel()
				if err != nil {
					r.violate("observer %d: watch from %d: %v", o, listRV, err)
					continue
				}
				r.mu.Lock()
				r.rounds++
				r.events += len(events)
				r.mu.Unlock()
				r.check(fmt.Sprintf("observer %d round %d", o, round), listRV, seen, events, prefix)
			}
		}(o)
	}
	time.Sleep(r.duration)
	close(stop)
	writers.Wait()
	observers.Wait()

	// Replay everything from the first list, until the final state of
	// every object has arrived.
	r.mu.Lock()
	final := map[string]int64{}
	for name, rvs := range r.acked {
		final[name] = rvs[len(rvs)-1]
	}
	r.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	events, err := watchEvents(wctx, observed, first.GetResourceVersion(), final)
	cancel()
	if err != nil {
		r.fatal = fmt.Errorf("replaying from %d: %v", firstRV, err)
		return
	}
	got := map[string]int64{}
	for _, e := range events {
		got[e.name] = e.rv
	}
	for name, rv := range final {
		if got[name] < rv && !r.unsure[name] {
			r.violate("replay from %d: the final state of %s (resourceVersion %d) was never delivered (last delivered %d)", firstRV, name, rv, got[name])
		}
	}
	r.check("replay", firstRV, nil, events, prefix)
}

// check compares one list and the watch that followed it with what the
// writers were told.
func (r *consistencyRun) check(who string, listRV int64, seen map[string]int64, events []ackedWrite, prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var maxDelivered int64
	delivered := map[ackedWrite]bool{}
	last := listRV
	for _, e := range events {
		if e.rv <= last {
			r.violations = append(r.violations, fmt.Sprintf("%s: event %s@%d after %d: out of order or repeated", who, e.name, e.rv, last))
		}
		last = e.rv
		delivered[e] = true
		maxDelivered = max(maxDelivered, e.rv)
	}
	names := make([]string, 0, len(r.acked))
	for name := range r.acked {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if r.unsure[name] || !strings.HasPrefix(name, prefix) {
			continue
		}
		var want int64
		for _, rv := range r.acked[name] {
			if rv <= listRV {
				want = rv
			} else if rv <= maxDelivered && !delivered[ackedWrite{name, rv}] {
				r.violations = append(r.violations, fmt.Sprintf("%s: watch from %d skipped %s@%d (delivered up to %d)", who, listRV, name, rv, maxDelivered))
			}
		}
		if seen != nil && want > 0 && seen[name] < want {
			r.violations = append(r.violations, fmt.Sprintf("%s: list at %d shows %s@%d, but %d was acknowledged before", who, listRV, name, seen[name], want))
		}
	}
}

// watchEvents watches from rv until ctx ends, or, with until, as soon as
// every object in until has been delivered at or past its resourceVersion.
func watchEvents(ctx context.Context, client dynamic.ResourceInterface, rv string, until map[string]int64) ([]ackedWrite, error) {
	w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: false})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var events []ackedWrite
	pending := len(until)
	done := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return events, nil
		case e, ok := <-w.ResultChan():
			if !ok {
				if ctx.Err() != nil {
					return events, nil
				}
				return events, fmt.Errorf("the watch ended early")
			}
			if e.Type == watch.Error {
				return events, fmt.Errorf("watch error: %v", e.Object)
			}
			o, ok := e.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			ev := ackedWrite{o.GetName(), rvOf(o)}
			events = append(events, ev)
			if until != nil && !done[ev.name] && until[ev.name] > 0 && ev.rv >= until[ev.name] {
				done[ev.name] = true
				pending--
				if pending == 0 {
					return events, nil
				}
			}
		}
	}
}
