package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestFaultServedDefaultsSessionsKilled: namespaces are created and
// deleted, and served defaults changed and deleted, by concurrent writers
// while PostgreSQL sessions are killed. A client that lists service
// accounts and then watches from the list (again from its last revision
// whenever the watch ends, as a reflector does) must end with exactly what
// a final list shows: no served default's ADDED or DELETED lost to a
// failed read, none shown twice.
func TestFaultServedDefaultsSessionsKilled(t *testing.T) {
	ds := framework.FreshPostgres(t)
	s := framework.StartServer(t, ds)
	const ws = "root:served-faults"
	s.CreateWorkspaces(ws)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", s.LogTail(200))
		}
	})
	ctx := context.Background()
	cfg := s.Config(ws)
	cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, 30*time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	type entry struct {
		uid types.UID
		rv  string
	}
	l, err := cs.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]entry{}
	for _, sa := range l.Items {
		seen[sa.Namespace+"/"+sa.Name] = entry{sa.UID, sa.ResourceVersion}
	}
	// The observer: a watch from the list, resumed from its last revision.
	stop := make(chan struct{})
	observed := make(chan struct{})
	var mu sync.Mutex
	var problems []string
	restarts := 0
	go func() {
		defer close(observed)
		rv := l.ResourceVersion
		for {
			select {
			case <-stop:
				return
			default:
			}
			w, err := cs.CoreV1().ServiceAccounts("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("watch from %s: %v", rv, err))
					mu.Unlock()
					return
				}
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for done := false; !done; {
				select {
				case <-stop:
					w.Stop()
					return
				case e, ok := <-w.ResultChan():
					if !ok {
						done = true
						break
					}
					if e.Type == watch.Error {
						done = true
						break
					}
					sa, ok := e.Object.(*corev1.ServiceAccount)
					if !ok {
						continue
					}
					rv = sa.ResourceVersion
					if e.Type == watch.Bookmark {
						continue
					}
					key := sa.Namespace + "/" + sa.Name
					mu.Lock()
					_, had := seen[key]
					switch e.Type {
					case watch.Added:
						if had {
							problems = append(problems, "ADDED twice: "+key)
						}
						seen[key] = entry{sa.UID, sa.ResourceVersion}
					case watch.Modified:
						if !had {
							problems = append(problems, "MODIFIED before ADDED: "+key)
						}
						seen[key] = entry{sa.UID, sa.ResourceVersion}
					case watch.Deleted:
						if !had {
							problems = append(problems, "DELETED unknown: "+key)
						}
						delete(seen, key)
					}
					mu.Unlock()
				}
			}
			w.Stop()
			mu.Lock()
			restarts++
			mu.Unlock()
		}
	}()

	// Writers: namespaces created and deleted, defaults changed and
	// deleted, each retried until it answers (a write may fail while
	// sessions die).
	retry := func(what string, f func() error) {
		for i := 0; ; i++ {
			err := f()
			if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return
			}
			if i > 100 {
				t.Errorf("%s: %v", what, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 12; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				retry("create "+name, func() error {
					_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
					return err
				})
				switch i % 3 {
				case 0:
					retry("patch the default of "+name, func() error {
						_, err := cs.CoreV1().ServiceAccounts(name).Patch(ctx, "default", types.MergePatchType, []byte(`{"metadata":{"labels":{"changed":"yes"}}}`), metav1.PatchOptions{})
						return err
					})
				case 1:
					retry("delete the default of "+name, func() error {
						return cs.CoreV1().ServiceAccounts(name).Delete(ctx, "default", metav1.DeleteOptions{})
					})
				}
				if i%2 == 1 {
					retry("delete "+name, func() error {
						return cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
					})
				}
			}
		}()
	}
	time.Sleep(time.Second)
	killSessions(t, ds)
	wg.Wait()

	// Settle: deleted namespaces gone, deleted defaults re-created.
	want := map[string]entry{}
	framework.Eventually(t, 90*time.Second, "namespaces settled and the observer caught up", func() (bool, string) {
		nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nss.Items {
			if n.DeletionTimestamp != nil {
				return false, "namespace " + n.Name + " still terminating"
			}
		}
		l, err := cs.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(l.Items) != len(nss.Items) {
			return false, fmt.Sprintf("%d service accounts for %d namespaces", len(l.Items), len(nss.Items))
		}
		want = map[string]entry{}
		for _, sa := range l.Items {
			want[sa.Namespace+"/"+sa.Name] = entry{sa.UID, sa.ResourceVersion}
		}
		mu.Lock()
		defer mu.Unlock()
		var diff []string
		for k, v := range want {
			if seen[k] != v {
				diff = append(diff, fmt.Sprintf("%s: list %v, watch %v", k, v, seen[k]))
			}
		}
		for k := range seen {
			if _, ok := want[k]; !ok {
				diff = append(diff, k+": only in the watch")
			}
		}
		sort.Strings(diff)
		return len(diff) == 0, strings.Join(diff, "; ")
	})
	close(stop)
	<-observed
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the watch of service accounts:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("%d service accounts at the end; the watch was resumed %d times", len(want), restarts)
}
