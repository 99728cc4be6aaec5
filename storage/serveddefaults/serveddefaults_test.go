package serveddefaults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine"
)

const ca = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"

// start runs the embedded kine on a fresh SQLite file with served defaults
// and returns an etcd client of it: the tests speak the etcd API, as the
// API server does.
func start(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, _ := startKine(t)
	return cli
}

// startKine is start that also returns the embedded kine.
func startKine(t *testing.T) (*clientv3.Client, *embeddedkine.Kine) {
	t.Helper()
	dir := t.TempDir()
	ds := datastoretest.Migrated(t, datastoretest.SQLiteDSN(t))
	cfg := embeddedkine.NewConfig(ds, dir)
	cfg.ServedDefaultsCA = ca
	cfg.PollInterval = 50 * time.Millisecond
	k, err := embeddedkine.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{k.Endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, k
}

func nsKey(cluster, name string) string { return "/registry/core/namespaces/" + cluster + "/" + name }
func saKey(cluster, ns string) string {
	return "/registry/core/serviceaccounts/" + cluster + "/" + ns + "/default"
}
func cmKey(cluster, ns string) string {
	return "/registry/core/configmaps/" + cluster + "/" + ns + "/kube-root-ca.crt"
}

func nsValue(name, uid string, terminating bool) string {
	phase, del := "Active", ""
	if terminating {
		phase, del = "Terminating", `,"deletionTimestamp":"2026-01-01T00:00:01Z"`
	}
	return fmt.Sprintf(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":%q,"uid":%q,"creationTimestamp":"2026-01-01T00:00:00Z"%s},"status":{"phase":%q}}`, name, uid, del, phase)
}

// asJSON decodes a value as the API server's storage does (served objects
// are protobuf, stored ones JSON) and returns the object as JSON.
func asJSON(t *testing.T, value []byte) string {
	t.Helper()
	o, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(value, nil, nil)
	if err != nil {
		t.Fatalf("decoding %q: %v", value, err)
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// create is the API server's create: put if the key has no revision.
func create(t *testing.T, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	r, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, value)).Commit()
	if err != nil || !r.Succeeded {
		t.Fatalf("create %s: succeeded=%v err=%v", key, r != nil && r.Succeeded, err)
	}
	return r.Header.Revision
}

// update is the API server's update: put if the key is at rev.
func update(t *testing.T, cli *clientv3.Client, key, value string, rev int64) (int64, bool) {
	t.Helper()
	r, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, value)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		t.Fatalf("update %s: %v", key, err)
	}
	return r.Header.Revision, r.Succeeded
}

func del(t *testing.T, cli *clientv3.Client, key string, rev int64) bool {
	t.Helper()
	r, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
	return r.Succeeded
}

func get(t *testing.T, cli *clientv3.Client, key string) *mvccpb.KeyValue {
	t.Helper()
	r, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return nil
	}
	return r.Kvs[0]
}

func keysOf(kvs []*mvccpb.KeyValue) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// listPaged lists prefix at rev in pages of limit, as the API server pages.
func listPaged(t *testing.T, cli *clientv3.Client, prefix string, limit, rev int64) []string {
	t.Helper()
	var out []string
	key := prefix
	end := clientv3.GetPrefixRangeEnd(prefix)
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatalf("paging %s with limit %d does not end", prefix, limit)
		}
		r, err := cli.Get(context.Background(), key, clientv3.WithRange(end), clientv3.WithLimit(limit), clientv3.WithRev(rev))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(r.Kvs)) > limit {
			t.Fatalf("page of %d keys with limit %d", len(r.Kvs), limit)
		}
		out = append(out, keysOf(r.Kvs)...)
		if !r.More {
			return out
		}
		if len(r.Kvs) == 0 {
			t.Fatalf("an empty page says there is more (limit %d, from %s)", limit, key)
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// eventsOf returns the events of w one at a time (kine may send several in
// one response).
func eventsOf(w clientv3.WatchChan) func(t *testing.T) *clientv3.Event {
	var pending []*clientv3.Event
	return func(t *testing.T) *clientv3.Event {
		t.Helper()
		for len(pending) == 0 {
			select {
			case r := <-w:
				if err := r.Err(); err != nil {
					t.Fatal(err)
				}
				pending = append(pending, r.Events...)
			case <-time.After(10 * time.Second):
				t.Fatal("no watch event")
			}
		}
		e := pending[0]
		pending = pending[1:]
		return e
	}
}

func TestServedDefaults(t *testing.T) {
	cli := start(t)
	ctx := context.Background()
	// Names whose keys sort differently from their namespaces' keys
	// ("a" < "a-b" but "a-b/default" < "a/default"), in clusters that do
	// the same ("root:x" and "root:x-y").
	type ns struct{ cluster, name string }
	all := []ns{{"root:x", "a"}, {"root:x", "a-b"}, {"root:x", "a-b-c"}, {"root:x", "b"}, {"root:x-y", "a"}, {"root:x-y", "default"}, {"root:z", "kube-system"}}
	revs := map[string]int64{}
	for i, n := range all {
		revs[n.cluster+"/"+n.name] = create(t, cli, nsKey(n.cluster, n.name), nsValue(n.name, fmt.Sprintf("uid-%d", i), false))
	}
	// A stored service account that is not a default, between defaults.
	create(t, cli, "/registry/core/serviceaccounts/root:x/a-b/builder", `{"kind":"ServiceAccount","apiVersion":"v1","metadata":{"name":"builder","namespace":"a-b"}}`)

	var want []string
	for _, n := range all {
		want = append(want, saKey(n.cluster, n.name))
	}
	want = append(want, "/registry/core/serviceaccounts/root:x/a-b/builder")
	sort.Strings(want)

	t.Run("get", func(t *testing.T) {
		kv := get(t, cli, saKey("root:x", "a-b"))
		if kv == nil {
			t.Fatal("the default service account of a namespace is not served")
		}
		if kv.ModRevision != revs["root:x/a-b"] || kv.CreateRevision != revs["root:x/a-b"] {
			t.Errorf("served at revisions %d/%d, want the namespace's %d", kv.CreateRevision, kv.ModRevision, revs["root:x/a-b"])
		}
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace, UID string
				Annotations          map[string]string
			}
		}
		if err := json.Unmarshal([]byte(asJSON(t, kv.Value)), &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind != "ServiceAccount" || o.Metadata.Name != "default" || o.Metadata.Namespace != "a-b" || o.Metadata.UID == "" || o.Metadata.Annotations["kcp.io/cluster"] != "root:x" {
			t.Errorf("served %s", kv.Value)
		}
		cm := get(t, cli, cmKey("root:z", "kube-system"))
		if cm == nil || !strings.Contains(asJSON(t, cm.Value), `"ca.crt":"-----BEGIN CERTIFICATE-----\ntest`) {
			t.Errorf("kube-root-ca.crt served as %v", cm)
		}
		if get(t, cli, saKey("root:x", "nope")) != nil || get(t, cli, "/registry/core/serviceaccounts/root:x/a/other") != nil {
			t.Error("served an object of a namespace that does not exist, or one that is not a default")
		}
	})

	t.Run("list in pages", func(t *testing.T) {
		rev := get(t, cli, nsKey("root:x", "a")).ModRevision + 100 // any revision after the creates
		r, err := cli.Get(ctx, "/registry/core/serviceaccounts/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
		if got := keysOf(r.Kvs); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("list:\n got %v\nwant %v", got, want)
		}
		for limit := int64(1); limit <= int64(len(want))+1; limit++ {
			if got := listPaged(t, cli, "/registry/core/serviceaccounts/", limit, rev); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("pages of %d:\n got %v\nwant %v", limit, got, want)
			}
		}
		// One cluster, one namespace.
		if got := listPaged(t, cli, "/registry/core/serviceaccounts/root:x/", 2, rev); len(got) != 5 {
			t.Errorf("root:x has %v", got)
		}
		if got := listPaged(t, cli, "/registry/core/serviceaccounts/root:x/a-b/", 1, rev); len(got) != 2 {
			t.Errorf("root:x/a-b has %v", got)
		}
		c, err := cli.Get(ctx, "/registry/core/serviceaccounts/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || c.Count != int64(len(want)) {
			t.Errorf("count %d (%v), want %d", c.Count, err, len(want))
		}
		// Before the namespaces existed nothing was served.
		old := listPaged(t, cli, "/registry/core/serviceaccounts/", 3, revs["root:x/a"]-1)
		if len(old) != 0 {
			t.Errorf("at a revision before the namespaces: %v", old)
		}
	})

	// Watch everything from now on, and check what the changes show.
	start, err := cli.Get(ctx, "/registry/core/serviceaccounts/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := cli.Watch(wctx, "/registry/core/serviceaccounts/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(start.Header.Revision+1))
	events := eventsOf(w)
	next := func(t *testing.T) *clientv3.Event { return events(t) }

	t.Run("update stores", func(t *testing.T) {
		key := saKey("root:x", "a")
		served := get(t, cli, key)
		if _, ok := update(t, cli, key, `{"kind":"ServiceAccount","stale":true}`, served.ModRevision-1); ok {
			t.Fatal("an update at the wrong revision succeeded")
		}
		rev, ok := update(t, cli, key, `{"kind":"ServiceAccount","changed":true}`, served.ModRevision)
		if !ok {
			t.Fatal("an update at the served revision failed")
		}
		if kv := get(t, cli, key); kv == nil || kv.ModRevision != rev || !strings.Contains(string(kv.Value), "changed") {
			t.Errorf("after the update: %v", kv)
		}
		e := next(t)
		if e.Type != clientv3.EventTypePut || e.IsCreate() || string(e.Kv.Key) != key || e.PrevKv == nil || string(e.PrevKv.Value) != string(served.Value) {
			t.Errorf("the first write of a default shows as %v (create %v), prev %v", e.Type, e.IsCreate(), e.PrevKv)
		}
		if _, ok := update(t, cli, key, `{"kind":"ServiceAccount","changed":2}`, rev); !ok {
			t.Fatal("an update of the stored default failed")
		}
		if e := next(t); e.IsCreate() || e.PrevKv == nil || !strings.Contains(string(e.PrevKv.Value), `"changed":true`) {
			t.Errorf("second update: %v", e)
		}
	})

	t.Run("delete and re-create", func(t *testing.T) {
		key := saKey("root:x", "b")
		served := get(t, cli, key)
		if del(t, cli, key, served.ModRevision+1) {
			t.Fatal("a delete at the wrong revision succeeded")
		}
		if !del(t, cli, key, served.ModRevision) {
			t.Fatal("the delete of a served default failed")
		}
		if kv := get(t, cli, key); kv != nil {
			t.Fatalf("a deleted default is still served: %s", kv.Value)
		}
		if e := next(t); e.Type != clientv3.EventTypeDelete || e.PrevKv == nil || string(e.PrevKv.Value) != string(served.Value) {
			t.Errorf("delete shows as %v", e)
		}
		r, err := cli.Get(ctx, "/registry/core/serviceaccounts/root:x/b/", clientv3.WithPrefix())
		if err != nil || len(r.Kvs) != 0 {
			t.Errorf("list after the delete: %v %v", keysOf(r.Kvs), err)
		}
		create(t, cli, key, `{"kind":"ServiceAccount","again":true}`)
		if e := next(t); e.Type != clientv3.EventTypePut || !e.IsCreate() {
			t.Errorf("a create after the delete shows as %v (create %v)", e.Type, e.IsCreate())
		}
		// A default that is served cannot be created.
		r2, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(saKey("root:x", "a-b")), "=", 0)).Then(clientv3.OpPut(saKey("root:x", "a-b"), "{}")).Commit()
		if err != nil || r2.Succeeded {
			t.Errorf("created over a served default: %v %v", r2, err)
		}
	})

	t.Run("namespace terminates and goes", func(t *testing.T) {
		n := nsKey("root:x-y", "a")
		// A deleted kube-root-ca.crt (a tombstone) in the namespace.
		cm := cmKey("root:x-y", "a")
		if !del(t, cli, cm, get(t, cli, cm).ModRevision) {
			t.Fatal("deleting kube-root-ca.crt")
		}
		cur := get(t, cli, n)
		rev, ok := update(t, cli, n, nsValue("a", "uid-4", true), cur.ModRevision)
		if !ok {
			t.Fatal("terminating the namespace failed")
		}
		e := next(t)
		if e.Type != clientv3.EventTypeDelete || string(e.Kv.Key) != saKey("root:x-y", "a") || e.Kv.ModRevision != rev {
			t.Errorf("a terminating namespace's default: %v %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision)
		}
		if get(t, cli, saKey("root:x-y", "a")) != nil {
			t.Error("a terminating namespace still serves its default")
		}
		// A default re-created once the namespace terminates (admission
		// let it through on a late view) would outlive the namespace: it is
		// refused, with no row at the key and over a tombstone.
		for _, key := range []string{saKey("root:x-y", "a"), cm} {
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, `{"kind":"again"}`)).Commit()
			if err != nil || r.Succeeded {
				t.Errorf("created %s in a terminating namespace: %v %v", key, r, err)
			}
			if kv := get(t, cli, key); kv != nil {
				t.Errorf("%s after a refused create: %s", key, kv.Value)
			}
		}
		// A namespace deleted at once (as deleting a workspace does).
		n2 := nsKey("root:x-y", "default")
		if !del(t, cli, n2, get(t, cli, n2).ModRevision) {
			t.Fatal("deleting the namespace failed")
		}
		if e := next(t); e.Type != clientv3.EventTypeDelete || string(e.Kv.Key) != saKey("root:x-y", "default") {
			t.Errorf("a deleted namespace's default: %v %s", e.Type, e.Kv.Key)
		}
	})

	t.Run("new namespace", func(t *testing.T) {
		rev := create(t, cli, nsKey("root:new", "web"), nsValue("web", "uid-new", false))
		e := next(t)
		if e.Type != clientv3.EventTypePut || !e.IsCreate() || string(e.Kv.Key) != saKey("root:new", "web") || e.Kv.ModRevision != rev {
			t.Errorf("a new namespace's default: %v create=%v %s@%d, want @%d", e.Type, e.IsCreate(), e.Kv.Key, e.Kv.ModRevision, rev)
		}
		// The tombstone of a deleted default hides nothing from a later
		// namespace of the same name.
		key := cmKey("root:new", "web")
		if !del(t, cli, key, get(t, cli, key).ModRevision) || get(t, cli, key) != nil {
			t.Fatal("deleting kube-root-ca.crt")
		}
		n := nsKey("root:new", "web")
		if !del(t, cli, n, get(t, cli, n).ModRevision) {
			t.Fatal("deleting the namespace")
		}
		next(t) // the service account goes
		create(t, cli, n, nsValue("web", "uid-new-2", false))
		next(t) // and comes back
		if get(t, cli, key) == nil {
			t.Error("a namespace created again does not serve kube-root-ca.crt")
		}
	})

	// Pages agree with one list once defaults are stored, deleted and
	// their namespaces gone.
	for _, prefix := range []string{"/registry/core/serviceaccounts/", "/registry/core/configmaps/"} {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		whole := strings.Join(keysOf(r.Kvs), " ")
		for limit := int64(1); limit <= int64(len(r.Kvs))+1; limit++ {
			if got := strings.Join(listPaged(t, cli, prefix, limit, r.Header.Revision), " "); got != whole {
				t.Errorf("%s in pages of %d:\n got %s\nwant %s", prefix, limit, got, whole)
			}
		}
	}
}

func lcValue(uid, owner string) string {
	ann := ""
	if owner != "" {
		ann = fmt.Sprintf(`,"annotations":{"tenancy.kcp.io/owner":%q}`, fmt.Sprintf(`{"username":%q}`, owner))
	}
	return fmt.Sprintf(`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"LogicalCluster","metadata":{"name":"cluster","uid":%q,"creationTimestamp":"2026-01-01T00:00:00Z"%s}}`, uid, ann)
}

// TestServedOwnerBinding: a workspace's owner binding is served from its
// LogicalCluster's recorded owner.
func TestServedOwnerBinding(t *testing.T) {
	cli := start(t)
	ctx := context.Background()
	lcKey := func(c string) string { return "/registry/tenancy.kcp.io/logicalclusters/" + c + "/cluster" }
	crbKey := func(c string) string {
		return "/registry/rbac.authorization.k8s.io/clusterrolebindings/" + c + "/workspace-owner"
	}
	const prefix = "/registry/rbac.authorization.k8s.io/clusterrolebindings/"
	start, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(start.Header.Revision+1))
	events := eventsOf(w)
	next := func() *clientv3.Event { return events(t) }

	revs := map[string]int64{}
	for _, c := range []string{"root:x", "root:x-y", "root:x-y-z", "root:y"} {
		revs[c] = create(t, cli, lcKey(c), lcValue("uid-"+c, "alice@"+c))
	}
	create(t, cli, lcKey("root:noowner"), lcValue("uid-n", ""))
	create(t, cli, prefix+"root:x/admins", `{"kind":"ClusterRoleBinding","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"admins"}}`)
	for _, c := range []string{"root:x", "root:x-y", "root:x-y-z", "root:y"} {
		if e := next(); !e.IsCreate() || string(e.Kv.Key) != crbKey(c) || e.Kv.ModRevision != revs[c] {
			t.Fatalf("want ADDED %s@%d, got %v", crbKey(c), revs[c], e)
		}
	}
	if e := next(); string(e.Kv.Key) != prefix+"root:x/admins" {
		t.Fatalf("want the stored binding's event, got %v", e)
	}
	kv := get(t, cli, crbKey("root:x-y"))
	if kv == nil || !strings.Contains(asJSON(t, kv.Value), `"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"alice@root:x-y"}]`) || !strings.Contains(asJSON(t, kv.Value), `"name":"cluster-admin"`) {
		t.Fatalf("served owner binding: %v", kv)
	}
	if get(t, cli, crbKey("root:noowner")) != nil {
		t.Error("a workspace without a recorded owner has an owner binding")
	}
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{crbKey("root:x-y-z"), crbKey("root:x-y"), prefix + "root:x/admins", crbKey("root:x"), crbKey("root:y")}
	if got := keysOf(r.Kvs); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("list:\n got %v\nwant %v", got, want)
	}
	for limit := int64(1); limit <= 6; limit++ {
		if got := listPaged(t, cli, prefix, limit, r.Header.Revision); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("pages of %d:\n got %v\nwant %v", limit, got, want)
		}
	}
	// Deleting the workspace's LogicalCluster takes the binding.
	if !del(t, cli, lcKey("root:y"), get(t, cli, lcKey("root:y")).ModRevision) {
		t.Fatal("deleting the LogicalCluster")
	}
	if e := next(); e.Type != clientv3.EventTypeDelete || string(e.Kv.Key) != crbKey("root:y") {
		t.Fatalf("want DELETED %s, got %v", crbKey("root:y"), e)
	}
	if get(t, cli, crbKey("root:y")) != nil {
		t.Error("the owner binding of a deleted workspace is served")
	}
}

// TestListObjects: the in-process list a watch cache fills itself from
// holds what a list through the etcd API holds, key for key: stored rows
// as stored, served defaults as the objects whose encoding the etcd API
// serves, each at the same revision; tombstones, terminating namespaces'
// defaults and workspaces without an owner hold nothing. The parents'
// whole ranges (every namespace, every LogicalCluster) are taken too.
func TestListObjects(t *testing.T) {
	cli, k := startKine(t)
	ctx := context.Background()
	lcKey := func(c string) string { return "/registry/tenancy.kcp.io/logicalclusters/" + c + "/cluster" }
	for i, n := range []string{"a", "a-b", "b", "gone", "ending"} {
		create(t, cli, nsKey("root:x", n), nsValue(n, fmt.Sprintf("uid-%d", i), n == "ending"))
	}
	create(t, cli, nsKey("root:x-y", "a"), nsValue("a", "uid-xy", false))
	create(t, cli, lcKey("root:x"), lcValue("uid-lx", "alice"))
	create(t, cli, lcKey("root:y"), lcValue("uid-ly", ""))
	create(t, cli, "/registry/core/serviceaccounts/root:x/a-b/builder", `{"kind":"ServiceAccount","apiVersion":"v1","metadata":{"name":"builder","namespace":"a-b"}}`)
	// A changed default is a row; a deleted one a tombstone.
	cur := get(t, cli, saKey("root:x", "b"))
	if _, ok := update(t, cli, saKey("root:x", "b"), `{"kind":"ServiceAccount","apiVersion":"v1","metadata":{"name":"default","namespace":"b","labels":{"changed":"yes"}}}`, cur.ModRevision); !ok {
		t.Fatal("updating a served default failed")
	}
	if !del(t, cli, cmKey("root:x", "gone"), get(t, cli, cmKey("root:x", "gone")).ModRevision) {
		t.Fatal("deleting a served default failed")
	}

	for _, prefix := range []string{"/registry/core/serviceaccounts/", "/registry/core/configmaps/", "/registry/rbac.authorization.k8s.io/clusterrolebindings/",
		"/registry/core/namespaces/", "/registry/tenancy.kcp.io/logicalclusters/"} {
		rev, items, ok, err := k.ListObjects(ctx, prefix)
		if err != nil || !ok {
			t.Fatalf("%s: ok %v, %v", prefix, ok, err)
		}
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision != rev {
			t.Fatalf("%s: listed at %d, the etcd API's list at %d (nothing was written in between)", prefix, rev, resp.Header.Revision)
		}
		var gotKeys []string
		for _, it := range items {
			gotKeys = append(gotKeys, it.Key)
		}
		if want := keysOf(resp.Kvs); strings.Join(gotKeys, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: in-process keys\n%v\nthe etcd API's\n%v", prefix, gotKeys, want)
		}
		served := 0
		for i, it := range items {
			kv := resp.Kvs[i]
			if it.Revision != kv.ModRevision {
				t.Errorf("%s at revision %d, through the etcd API %d", it.Key, it.Revision, kv.ModRevision)
			}
			value := it.Value
			if def := it.Default(); def != nil {
				served++
				if it.Value != nil {
					t.Errorf("%s: both a value and an object", it.Key)
				}
				if again := it.Default(); again == def {
					t.Errorf("%s: Default handed out the same object twice", it.Key)
				}
				var buf bytes.Buffer
				if err := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme).Encode(def, &buf); err != nil {
					t.Fatal(err)
				}
				value = buf.Bytes()
			}
			if !bytes.Equal(value, kv.Value) {
				t.Errorf("%s in-process:\n%s\nthrough the etcd API:\n%s", it.Key, asJSON(t, value), asJSON(t, kv.Value))
			}
		}
		if isParents := strings.Contains(prefix, "namespaces") || strings.Contains(prefix, "logicalclusters"); isParents != (served == 0) {
			t.Errorf("%s: %d served defaults among %d items", prefix, served, len(items))
		}
	}
	// Ranges without served defaults are not taken.
	for _, prefix := range []string{"/registry/core/secrets/", "/registry/core/serviceaccounts", "/registry/core/namespaces/root:x/"} {
		if _, _, ok, err := k.ListObjects(ctx, prefix); ok || err != nil {
			t.Errorf("%s: ok %v, %v; want not taken", prefix, ok, err)
		}
	}
}
