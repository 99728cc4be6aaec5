package clusterinformer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// scriptedWatches hands out one watch per call, as the test scripts them,
// and records the options of every call.
type scriptedWatches struct {
	mu      sync.Mutex
	opts    []metav1.ListOptions
	watches chan *watch.FakeWatcher
	errs    chan error
}

func newScripted() *scriptedWatches {
	return &scriptedWatches{watches: make(chan *watch.FakeWatcher, 10), errs: make(chan error, 10)}
}

func (s *scriptedWatches) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return nil, errors.New("not listed in this test")
}

func (s *scriptedWatches) WatchWithContext(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	s.opts = append(s.opts, o)
	s.mu.Unlock()
	select {
	case err := <-s.errs:
		return nil, err
	default:
	}
	select {
	case w := <-s.watches:
		return w, nil
	case <-time.After(5 * time.Second):
		return nil, errors.New("the test scripted no further watch")
	}
}

func (s *scriptedWatches) calls() []metav1.ListOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metav1.ListOptions(nil), s.opts...)
}

func atRV(rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + rv, ResourceVersion: rv}}
}

// next reads one event (or the end) within a few seconds.
func next(t *testing.T, w watch.Interface) (watch.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		return ev, ok
	case <-time.After(5 * time.Second):
		t.Fatal("no event and no end within 5s")
		return watch.Event{}, false
	}
}

func wantRV(t *testing.T, w watch.Interface, typ watch.EventType, rv string) {
	t.Helper()
	ev, ok := next(t, w)
	if !ok {
		t.Fatalf("the watch ended; want %s at %s", typ, rv)
	}
	m, ok := ev.Object.(metav1.Object)
	if ev.Type != typ || !ok || m.GetResourceVersion() != rv {
		t.Fatalf("got %s %#v; want %s at %s", ev.Type, ev.Object, typ, rv)
	}
}

func wantEnd(t *testing.T, w watch.Interface) {
	t.Helper()
	if ev, ok := next(t, w); ok {
		t.Fatalf("got %s %#v; want the watch to end", ev.Type, ev.Object)
	}
}

// A watch the server ends is watched again from the last resourceVersion
// delivered (an event or a bookmark), with the caller's other options,
// and the caller sees every event once, in order, on one watch. An error
// event ends it.
func TestResumeWatchFromLastDelivered(t *testing.T) {
	s := newScripted()
	first, second, third := watch.NewFake(), watch.NewFake(), watch.NewFake()
	s.watches <- first
	opts := metav1.ListOptions{ResourceVersion: "4", FieldSelector: "metadata.name=x", AllowWatchBookmarks: true, TimeoutSeconds: new(int64)}
	w, err := resumeWatch(context.Background(), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		first.Add(atRV("5"))
		first.Modify(atRV("6"))
		first.Stop() // the server ends the watch
	}()
	wantRV(t, w, watch.Added, "5")
	wantRV(t, w, watch.Modified, "6")
	s.watches <- second
	go func() {
		second.Action(watch.Bookmark, atRV("8"))
		second.Stop()
	}()
	wantRV(t, w, watch.Bookmark, "8")
	s.watches <- third
	gone := apierrors.NewResourceExpired("too old resource version: 8 (10)").Status()
	go func() {
		third.Delete(atRV("9"))
		third.Error(&gone)
	}()
	wantRV(t, w, watch.Deleted, "9")
	ev, ok := next(t, w)
	if !ok || ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Fatalf("got %v %s %#v; want the 410 error event", ok, ev.Type, ev.Object)
	}
	wantEnd(t, w)

	calls := s.calls()
	if len(calls) != 3 {
		t.Fatalf("%d watches; want 3", len(calls))
	}
	for i, want := range []string{"4", "6", "8"} {
		o := calls[i]
		if o.ResourceVersion != want || o.FieldSelector != opts.FieldSelector || !o.AllowWatchBookmarks || o.TimeoutSeconds != opts.TimeoutSeconds {
			t.Errorf("watch %d: options %+v; want those given, from resourceVersion %s", i, o, want)
		}
	}
}

// An error establishing a later watch reaches the caller: a status as an
// error event (the reflector lists again on 410 Gone), anything else as
// the end of the watch.
func TestResumeWatchPassesErrorsOn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantEvent bool
	}{
		{"status", apierrors.NewGone("too old"), true},
		{"wrapped status", fmt.Errorf("watching configmaps: %w", apierrors.NewGone("too old")), true},
		{"other", errors.New("connection refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScripted()
			first := watch.NewFake()
			s.watches <- first
			w, err := resumeWatch(context.Background(), s, metav1.ListOptions{ResourceVersion: "1"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			s.errs <- tc.err
			go func() { first.Add(atRV("2")); first.Stop() }()
			wantRV(t, w, watch.Added, "2")
			if tc.wantEvent {
				ev, ok := next(t, w)
				if !ok || ev.Type != watch.Error || !apierrors.IsGone(apierrors.FromObject(ev.Object)) {
					t.Fatalf("got %v %s %#v; want the 410 error event", ok, ev.Type, ev.Object)
				}
			}
			wantEnd(t, w)
		})
	}
	// The first watch's error is returned as is.
	s := newScripted()
	s.errs <- apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no"))
	if _, err := resumeWatch(context.Background(), s, metav1.ListOptions{ResourceVersion: "1"}); !apierrors.IsForbidden(err) {
		t.Fatalf("got %v; want the first watch's Forbidden", err)
	}
}

// A watch from "" or "0" starts with the current state, so it is not
// resumed: the caller gets the server's watch itself.
func TestResumeWatchNotFromCurrentState(t *testing.T) {
	for _, rv := range []string{"", "0"} {
		s := newScripted()
		first := watch.NewFake()
		s.watches <- first
		w, err := resumeWatch(context.Background(), s, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatal(err)
		}
		if w != watch.Interface(first) {
			t.Fatalf("resourceVersion %q: got %T; want the server's watch", rv, w)
		}
	}
}

// Stop and the caller's context end the watch and the server's watch, and
// watches the server ends at once, without an event, are asked for again
// with growing delays rather than in a loop.
func TestResumeWatchStopsAndBacksOff(t *testing.T) {
	s := newScripted()
	for range 10 {
		w := watch.NewFake()
		w.Stop()
		s.watches <- w
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := resumeWatch(ctx, s, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); len(s.calls()) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(400 * time.Millisecond)
	// Resumed (a second watch), but not in a loop: 50 + 100 + 200 ms of
	// delays leave room for at most four watches in the first 400 ms, and
	// a loop would have made hundreds.
	if n := len(s.calls()); n < 2 || n > 5 {
		t.Errorf("%d watches of a server ending them at once; want 2 to 5", n)
	}
	cancel()
	wantEnd(t, w)

	s = newScripted()
	live := watch.NewFake()
	s.watches <- live
	w, err = resumeWatch(context.Background(), s, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	wantEnd(t, w)
	if !live.IsStopped() {
		t.Error("the server's watch was not stopped")
	}
}

// countingLists serves one list of every cluster and then the scripted
// watches, counting the lists.
type countingLists struct {
	*scriptedWatches
	mu    sync.Mutex
	lists int
}

func (c *countingLists) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	first := cm("root:a", "default", "first", nil)
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.ConfigMap{*first}}, nil
}

func (c *countingLists) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists
}

// What a user of an informer across clusters sees when the API server ends
// its watch at once, before any event (the watch cache dropping a client
// that fell behind while the server was busy): the informer goes on from
// where it was, with one list in all, and gets the next change. client-go's
// reflector alone would take this for a "very short watch" and list every
// object of every cluster again.
func TestInformerDoesNotListAgainWhenTheServerEndsItsWatch(t *testing.T) {
	lw := &countingLists{scriptedWatches: newScripted()}
	ended := watch.NewFake()
	ended.Stop() // ended by the server before delivering anything
	lw.watches <- ended
	next := watch.NewFake()
	lw.watches <- next

	inf := New[*corev1.ConfigMap](&cache.ListWatch{ListWithContextFunc: lw.ListWithContext, WatchFuncWithContext: lw.WatchWithContext})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	second := cm("root:b", "default", "second", nil)
	second.ResourceVersion = "11"
	next.Add(second) // blocks until the informer's watch took it
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, ok, _ := inf.Indexer().GetByKey(Key("root:b", "default", "second")); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the change after the ended watch did not reach the informer's cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := lw.count(); n != 1 {
		t.Errorf("%d lists of every cluster; want 1", n)
	}
	calls := lw.calls()
	if len(calls) != 2 || calls[0].ResourceVersion != "10" || calls[1].ResourceVersion != "10" {
		t.Errorf("watches %+v; want two, both from the list's resourceVersion 10", calls)
	}
}
