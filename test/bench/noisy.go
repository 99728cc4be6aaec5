package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var (
	noisyOnly     = flag.Bool("noisy", false, "only measure a noisy neighbour: tenant B's small requests while tenant A floods the server")
	noisyObjects  = flag.Int("noisy-objects", 2000, "configmaps (1 KiB each) tenant A lists")
	noisyLists    = flag.Int("noisy-lists", 32, "tenant A's concurrent unpaged lists")
	noisyWriters  = flag.Int("noisy-writers", 16, "tenant A's concurrent writers (secret updates, one after another each)")
	noisyWatches  = flag.Int("noisy-watches", 200, "watches tenant A opens at once (each starts with every object)")
	noisyWatchRV  = flag.String("noisy-watch-rv", "", "the resourceVersion tenant A's watches start from: \"\" (none, as a client that does not list first) or \"0\" (any)")
	noisyBefore   = flag.String("noisy-before", "", "a kcp binary of an earlier build to measure first, side by side (e.g. built from the commit before per-tenant fairness)")
	noisyDuration = flag.Duration("noisy-duration", 15*time.Second, "how long tenant B is measured in each phase")
)

type noisyPhase struct {
	name     string
	p50, p99 time.Duration
	ratio    float64 // p99 / idle p99
	bRate    float64 // B's requests per second
	aRate    float64 // A's completed requests per second
}

type noisyResult struct {
	bin    string
	phases []noisyPhase
}

// impersonating returns a client of cluster acting as user (the admin
// impersonates, so API priority and fairness sees user).
func (s *server) impersonating(cluster, user string) (*kubernetes.Clientset, error) {
	cfg, err := s.config(cluster)
	if err != nil {
		return nil, err
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return kubernetes.NewForConfig(cfg)
}

// grantTenant makes user an ordinary user with cluster-admin inside
// workspace ws (not system:masters, so APF applies to it).
func (s *server) grantTenant(ctx context.Context, ws, user string) error {
	root, err := s.client("root")
	if err != nil {
		return err
	}
	if err := applyRBAC(ctx, root, user+"-access", user, "workspaces/content", strings.TrimPrefix(ws, "root:")); err != nil {
		return err
	}
	c, err := s.client(ws)
	if err != nil {
		return err
	}
	return applyRBAC(ctx, c, user+"-admin", user, "", "")
}

func benchNoisy(bin string, log func(string, ...any)) (noisyResult, error) {
	r := noisyResult{bin: bin}
	s, stop, err := startInTemp("noisy", bin)
	if err != nil {
		return r, err
	}
	defer stop()
	if err := s.createWorkspaces([][2]string{{"root", "noisy-a"}, {"root", "quiet-b"}}); err != nil {
		return r, err
	}
	ctx := context.Background()
	for ws, user := range map[string]string{"root:noisy-a": "alice", "root:quiet-b": "bob"} {
		if err := s.grantTenant(ctx, ws, user); err != nil {
			return r, err
		}
	}
	admA, err := s.client("root:noisy-a")
	if err != nil {
		return r, err
	}
	admB, err := s.client("root:quiet-b")
	if err != nil {
		return r, err
	}
	data := map[string]string{"v": strings.Repeat("x", 1024)}
	if err := createConfigMaps(ctx, admA, *noisyObjects, data); err != nil {
		return r, err
	}
	if err := createConfigMaps(ctx, admB, 10, data); err != nil {
		return r, err
	}
	a, err := s.impersonating("root:noisy-a", "alice")
	if err != nil {
		return r, err
	}
	b, err := s.impersonating("root:quiet-b", "bob")
	if err != nil {
		return r, err
	}
	if _, err := a.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return r, fmt.Errorf("tenant A's user cannot list: %v", err)
	}

	// measureB runs B's small gets and lists one after another for d.
	measureB := func(d time.Duration) ([]time.Duration, error) {
		var lat, gets, lists []time.Duration
		defer func() {
			log("  B gets p50 %s p99 %s; B lists p50 %s p99 %s", percentile(gets, 0.5), percentile(gets, 0.99), percentile(lists, 0.5), percentile(lists, 0.99))
		}()
		end := time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			t := time.Now()
			var err error
			if i%2 == 0 {
				_, err = b.CoreV1().ConfigMaps("default").Get(ctx, "cm-0", metav1.GetOptions{})
			} else {
				_, err = b.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			}
			if err != nil && !strings.Contains(err.Error(), "rate") {
				return nil, err
			}
			lat = append(lat, time.Since(t))
			if i%2 == 0 {
				gets = append(gets, time.Since(t))
			} else {
				lists = append(lists, time.Since(t))
			}
		}
		return lat, nil
	}
	var idleP99 time.Duration
	phase := func(name string, lat []time.Duration, aDone int64) {
		p := noisyPhase{name: name, p50: percentile(lat, 0.5), p99: percentile(lat, 0.99),
			bRate: float64(len(lat)) / noisyDuration.Seconds(), aRate: float64(aDone) / noisyDuration.Seconds()}
		if idleP99 == 0 {
			idleP99 = p.p99
		}
		p.ratio = float64(p.p99) / float64(idleP99)
		log("%s: B p50 %s p99 %s (%.1fx idle p99), B %.0f req/s, A %.1f req/s", name, p.p50, p.p99, p.ratio, p.bRate, p.aRate)
		r.phases = append(r.phases, p)
	}

	lat, err := measureB(*noisyDuration)
	if err != nil {
		return r, err
	}
	phase("idle", lat, 0)

	// A: concurrent unpaged lists of all its configmaps.
	flood, stop := context.WithCancel(ctx)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range *noisyLists {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The body is read and dropped, not decoded: decoding in this
			// process would take the CPU the measurement is about.
			for flood.Err() == nil {
				rc, err := a.CoreV1().RESTClient().Get().Namespace("default").Resource("configmaps").Stream(flood)
				if err != nil {
					continue
				}
				if _, err := io.Copy(io.Discard, rc); err == nil {
					done.Add(1)
				}
				rc.Close()
			}
		}()
	}
	time.Sleep(2 * time.Second)
	done.Store(0)
	lat, err = measureB(*noisyDuration)
	aDone := done.Load()
	stop()
	wg.Wait()
	if err != nil {
		return r, err
	}
	phase(fmt.Sprintf("A runs %d concurrent unpaged lists of %d objects", *noisyLists, *noisyObjects), lat, aDone)

	// A: concurrent writers, each updating a secret of its own in a loop:
	// another resource than B reads, so B's lists from the watch cache
	// would have to wait for the cache to catch up with A's writes.
	for w := range *noisyWriters {
		if _, err := admA.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", w)}}, metav1.CreateOptions{}); err != nil {
			return r, err
		}
	}
	writes, stopWrites := context.WithCancel(ctx)
	done.Store(0)
	for w := range *noisyWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("cm-%d", w)
			for i := 0; writes.Err() == nil; i++ {
				sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"v": fmt.Sprint(i)}}
				if _, err := a.CoreV1().Secrets("default").Update(writes, sec, metav1.UpdateOptions{}); err == nil {
					done.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	done.Store(0)
	lat, err = measureB(*noisyDuration)
	aDone = done.Load()
	stopWrites()
	wg.Wait()
	if err != nil {
		return r, err
	}
	phase(fmt.Sprintf("A runs %d concurrent writers (secret updates)", *noisyWriters), lat, aDone)

	// A: many watches opened at once, each starting with every object.
	watchCtx, stopWatches := context.WithCancel(ctx)
	var events atomic.Int64
	for range *noisyWatches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := a.CoreV1().ConfigMaps("default").Watch(watchCtx, metav1.ListOptions{ResourceVersion: *noisyWatchRV})
			if err != nil {
				return
			}
			defer w.Stop()
			for {
				select {
				case <-watchCtx.Done():
					return
				case _, ok := <-w.ResultChan(): // decoded: client-go's watch has no raw form
					if !ok {
						return
					}
					events.Add(1)
				}
			}
		}()
	}
	lat, err = measureB(*noisyDuration)
	stopWatches()
	wg.Wait()
	if err != nil {
		return r, err
	}
	phase(fmt.Sprintf("A opens %d watches from resourceVersion %q at once", *noisyWatches, *noisyWatchRV), lat, events.Load()/int64(*noisyObjects))
	return r, nil
}

func createConfigMaps(ctx context.Context, c *kubernetes.Clientset, n int, data map[string]string) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := atomic.Int64{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: data}, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func renderNoisy(rs []noisyResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Tenant B's small gets and lists (one at a time) while tenant A, an ordinary user of another workspace, floods the server (`go run ./test/bench -noisy`; %d objects of 1 KiB in A; SQLite).\n\n", *noisyObjects)
	b.WriteString("| kcp | phase | B p50 | B p99 | B p99 / idle p99 | B requests/s | A completed/s |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		args := "this build"
		if r.bin != "" {
			args = "before (" + filepath.Base(r.bin) + ")"
		}
		for _, p := range r.phases {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %.0f | %.1f |\n", args, p.name, p.p50.Round(100*time.Microsecond), p.p99.Round(100*time.Microsecond), p.ratio, p.bRate, p.aRate)
		}
	}
	return b.String()
}

// applyRBAC binds user to cluster-admin (resource "") or to a new
// ClusterRole allowing "access" on resource/resourceName of tenancy.kcp.io.
func applyRBAC(ctx context.Context, c *kubernetes.Clientset, name, user, resource, resourceName string) error {
	role := "cluster-admin"
	if resource != "" {
		role = name
		if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"tenancy.kcp.io"}, Resources: []string{resource}, ResourceNames: []string{resourceName}, Verbs: []string{"access"}}}},
			metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}, metav1.CreateOptions{})
	return err
}
