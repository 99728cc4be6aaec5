package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestTwoReplicasOnPostgres: two kcp processes on one PostgreSQL database
// serve the same data; a write through A is seen by a watch through B; when
// A dies, B keeps serving, nothing acknowledged is lost, and B takes over
// the controllers (a new workspace becomes ready).
func TestTwoReplicasOnPostgres(t *testing.T) {
	a := framework.StartServer(t, framework.FreshPostgres(t))
	b := framework.StartReplica(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	a.CreateWorkspaces("root:shared")
	// B sees A's writes once kine's poller on B has read them (about a second).
	framework.Eventually(t, 20*time.Second, "B to see the workspace created through A", func() (bool, string) {
		_, err := b.Client("root:shared").CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	// A watch through B from a list's resourceVersion, as clients watch:
	// the server may end a watch at any time, and a client resumes from the
	// last resourceVersion it saw; what B must not do is skip a write.
	cms := b.Client("root:shared").CoreV1().ConfigMaps("default")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Stop() }()
	for i := 0; i < 5; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "from-a-" + string(rune('0'+i))}}
		if _, err := a.Client("root:shared").CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	resumed := 0
	for len(seen) < 5 {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				// Logged, not failed: ending a watch is the server's right.
				resumed++
				t.Logf("watch through B ended after %v; resuming from resourceVersion %s (B's log:\n%s)", seen, rv, b.LogTail(20))
				if resumed > 3 {
					t.Fatalf("the watch through B ended %d times before it delivered the 5 writes through A", resumed)
				}
				if w, err = cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err != nil {
					t.Fatalf("resuming the watch through B from %s: %v", rv, err)
				}
				continue
			}
			if ev.Type == watch.Error {
				t.Fatalf("the watch through B failed after %v (from resourceVersion %s): %v", seen, rv, ev.Object)
			}
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
				rv = cm.ResourceVersion
				if len(cm.Name) > 7 && cm.Name[:7] == "from-a-" {
					seen[cm.Name] = true
				}
			}
		case <-ctx.Done():
			t.Fatalf("watch through B saw %v; B's log:\n%s", seen, b.LogTail(60))
		}
	}

	// Each replica has an identity Lease of its own (upstream names it
	// after the host name alone, and replicas on one host fought over
	// one): two, each held by the replica it names, renewed.
	framework.Eventually(t, 30*time.Second, "one API server identity Lease per replica", func() (bool, string) {
		leases, err := b.Client("root").CoordinationV1().Leases("kube-system").List(ctx,
			metav1.ListOptions{LabelSelector: "apiserver.kubernetes.io/identity"})
		if err != nil {
			return false, err.Error()
		}
		var got []string
		for _, l := range leases.Items {
			h := ""
			if l.Spec.HolderIdentity != nil {
				h = *l.Spec.HolderIdentity
			}
			got = append(got, l.Name+" held by "+h)
			if !strings.HasPrefix(h, l.Name+"_") {
				return false, fmt.Sprint(got)
			}
		}
		return len(leases.Items) == 2, fmt.Sprint(got)
	})
	for _, s := range []*framework.Server{a, b} {
		if log := s.LogTail(2000); strings.Contains(log, "Failed to update lease") {
			t.Errorf("a replica logged identity Lease conflicts:\n%s", log)
		}
	}

	holder := func() string { return controllersLeaseHolder(ctx, b) }
	before := holder()
	if before == "" {
		t.Fatal("no replica holds the controllers' lease")
	}
	a.Kill()
	list, err = cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range list.Items {
		if len(cm.Name) > 7 && cm.Name[:7] == "from-a-" {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("after A died, B lists %d of the 5 objects written through A", n)
	}
	// The controllers run on B once A's lease expires (if A held it).
	b.CreateWorkspaces("root:after-failover")
	if after := holder(); after == "" || (after == before && a.LogTail(1000) != "" && containsLeader(a.LogTail(1000))) {
		t.Errorf("lease holder before %q, after %q", before, after)
	}
}

func containsLeader(log string) bool {
	return strings.Contains(log, "this replica runs the controllers")
}

// controllersLeaseHolder is the holder of the controllers' lease, read
// through s; "" if none.
func controllersLeaseHolder(ctx context.Context, s *framework.Server) string {
	l, err := s.Client("root").CoordinationV1().Leases("kube-system").Get(ctx, "kcp-controllers", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// controllersLeader waits for one of two replicas to hold the controllers'
// lease and returns it, the other replica and the holder's identity.
func controllersLeader(t *testing.T, ctx context.Context, a, b *framework.Server) (leader, other *framework.Server, holder string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "a replica to hold the controllers' lease", func() (bool, string) {
		holder = controllersLeaseHolder(ctx, b)
		return holder != "", "no holder"
	})
	if strings.Contains(a.LogTail(100000), holder) {
		return a, b, holder
	}
	return b, a, holder
}

// TestStopReleasesControllersLease: a replica stopped gracefully (SIGTERM,
// as in a rolling update) gives the controllers' lease up on its way out,
// so another replica runs the controllers at once instead of after the
// lease expires (15 s without workspaces becoming ready).
func TestStopReleasesControllersLease(t *testing.T) {
	a := framework.StartServer(t, framework.FreshPostgres(t))
	b := framework.StartReplica(t, a)
	ctx := context.Background()
	leader, other, before := controllersLeader(t, ctx, a, b)
	leader.Stop()
	if after := controllersLeaseHolder(ctx, other); after == before {
		t.Errorf("after a graceful stop the stopped replica still holds the controllers' lease (%q): the other replica waits for it to expire", after)
	}
	// The other replica runs the controllers: a new workspace becomes ready.
	other.CreateWorkspaces("root:after-stop")
}

// TestReplicasStartTogetherOnPostgres: two replicas started at the same
// instant on a PostgreSQL database that does not exist yet (as a
// deployment's pods start) both create, migrate and bootstrap what they
// find missing; both become ready,
// the schema is migrated once and clean, root has its namespaces and RBAC
// defaults, and each serves what the other writes: a workspace created
// through either is Ready and seen through the other.
func TestReplicasStartTogetherOnPostgres(t *testing.T) {
	dsn := datastoretest.UncreatedPostgresDSN(t)
	servers := framework.StartReplicasTogether(t, dsn, 2)
	a, b := servers[0], servers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	kcp, _ := framework.Binaries(t)
	out, err := exec.Command(kcp, "migrate", "version", "--datastore", dsn).CombinedOutput()
	if err != nil || !regexp.MustCompile(`schema version (\d+) of (\d+)\s*$`).Match(out) {
		t.Fatalf("kcp migrate version: %v\n%s", err, out)
	}
	if m := regexp.MustCompile(`schema version (\d+) of (\d+)`).FindSubmatch(out); string(m[1]) != string(m[2]) {
		t.Errorf("schema after two replicas started together: %s", out)
	}

	for name, s := range map[string]*framework.Server{"A": a, "B": b} {
		nss, err := s.Client("root").CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("namespaces of root through %s: %v", name, err)
		}
		var got []string
		for _, ns := range nss.Items {
			got = append(got, ns.Name)
		}
		for _, want := range []string{"default", "kube-system", "kube-public"} {
			if !slices.Contains(got, want) {
				t.Errorf("root through %s has namespaces %v: %s missing", name, got, want)
			}
		}
		if _, err := s.Client("root").RbacV1().ClusterRoles().Get(ctx, "cluster-admin", metav1.GetOptions{}); err != nil {
			t.Errorf("ClusterRole cluster-admin through %s: %v", name, err)
		}
	}

	a.CreateWorkspaces("root:from-a")
	b.CreateWorkspaces("root:from-b")
	for name, s := range map[string]*framework.Server{"A": a, "B": b} {
		for _, ws := range []string{"root:from-a", "root:from-b"} {
			framework.Eventually(t, 20*time.Second, fmt.Sprintf("%s to serve workspace %s", name, ws), func() (bool, string) {
				_, err := s.Client(ws).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
				return err == nil, fmt.Sprint(err)
			})
		}
	}
	for name, s := range map[string]*framework.Server{"A": a, "B": b} {
		if log := s.LogTail(100000); strings.Contains(log, "panic") {
			t.Errorf("%s's log has a panic:\n%s", name, s.LogTail(80))
		}
	}
}

// TestDefaultsChangedWhileNoReplicaRunsControllers: a namespace's default
// service account is deleted and its kube-root-ca.crt changed while no
// replica runs the controllers (the holder of their lease was killed and
// the lease has not expired). The replica that takes the controllers over
// finds both when its namespace-defaults controller first lists (from the
// stored rows: the tombstone and the changed config map) and puts them
// back, without a watch event to tell it.
func TestDefaultsChangedWhileNoReplicaRunsControllers(t *testing.T) {
	a := framework.StartServer(t, framework.FreshPostgres(t))
	b := framework.StartReplica(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a.CreateWorkspaces("root:team")
	leader, other, _ := controllersLeader(t, ctx, a, b)
	core := other.Client("root:team").CoreV1()
	framework.Eventually(t, 20*time.Second, "the other replica to serve the workspace's defaults", func() (bool, string) {
		_, err := core.ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	cm, err := core.ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := cm.Data["ca.crt"]
	if ca == "" {
		t.Fatalf("kube-root-ca.crt holds no CA: %v", cm.Data)
	}

	leader.Kill() // the lease stays held until it expires
	if containsLeader(other.LogTail(100000)) {
		t.Fatal("the other replica ran the controllers before the leader was killed")
	}
	if err := core.ServiceAccounts("default").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"ca.crt": "tampered"}
	if _, err := core.ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if containsLeader(other.LogTail(100000)) {
		t.Fatal("the other replica took the controllers over before the defaults were changed: the test proves nothing")
	}
	if _, err := core.ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
		t.Fatal("the deleted default service account is still served")
	}

	framework.Eventually(t, 90*time.Second, "the replica taking the controllers over to restore the defaults", func() (bool, string) {
		_, saErr := core.ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		got, cmErr := core.ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if saErr != nil || cmErr != nil {
			return false, fmt.Sprintf("service account: %v; config map: %v", saErr, cmErr)
		}
		return len(got.Data) == 1 && got.Data["ca.crt"] == ca, fmt.Sprintf("kube-root-ca.crt holds %v", got.Data)
	})
	if !containsLeader(other.LogTail(100000)) {
		t.Errorf("the defaults came back but the other replica never ran the controllers:\n%s", other.LogTail(40))
	}
}
