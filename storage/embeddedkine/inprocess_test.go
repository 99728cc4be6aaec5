package embeddedkine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
)

// TestInProcessClient: the in-process etcd client (what the server's
// stores use) answers as a client through kine's socket does: the same
// keys, values and revisions from gets, lists and streamed lists, the same
// outcome of a conflicting write, a watch that delivers every later
// change in order, and errors with the gRPC codes a socket client sees.
func TestInProcessClient(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			k := kinetest.Start(t, d.DSN(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in := k.Client()
			defer in.Close()
			sock, err := etcdkubernetes.New(clientv3.Config{Endpoints: []string{k.Endpoint}, DialTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer sock.Close()
			const prefix = "/registry/core/configmaps/c1/ns/"

			// A watch from now, through the in-process client.
			start, err := in.Kubernetes.Get(ctx, prefix+"none", etcdkubernetes.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			events := in.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start.Revision+1), clientv3.WithPrevKV())

			// Writes through both clients.
			var want []string
			revs := map[string]int64{}
			for i := 0; i < 6; i++ {
				c := in
				if i%2 == 1 {
					c = sock
				}
				key := fmt.Sprintf("%scm-%d", prefix, i)
				r, err := c.Kubernetes.OptimisticPut(ctx, key, []byte(fmt.Sprintf("v%d", i)), 0, etcdkubernetes.PutOptions{})
				if err != nil || !r.Succeeded {
					t.Fatalf("create %s: succeeded=%v, %v", key, r.Succeeded, err)
				}
				revs[key] = r.Revision
				want = append(want, fmt.Sprintf("PUT %s v%d @%d", key, i, r.Revision))
			}
			// A create of an existing key fails the same way through both.
			for name, c := range map[string]*etcdkubernetes.Client{"in-process": in, "socket": sock} {
				r, err := c.Kubernetes.OptimisticPut(ctx, prefix+"cm-0", []byte("again"), 0, etcdkubernetes.PutOptions{GetOnFailure: true})
				if err != nil || r.Succeeded || r.KV == nil || string(r.KV.Value) != "v0" {
					t.Errorf("%s: create of an existing key: succeeded=%v kv=%v, %v; want a failed compare returning the stored v0", name, r.Succeeded, r.KV, err)
				}
			}
			del, err := in.Kubernetes.OptimisticDelete(ctx, prefix+"cm-1", revs[prefix+"cm-1"], etcdkubernetes.DeleteOptions{GetOnFailure: true})
			if err != nil || !del.Succeeded {
				t.Fatalf("delete: succeeded=%v, %v", del.Succeeded, err)
			}
			want = append(want, fmt.Sprintf("DELETE %scm-1 @%d", prefix, del.Revision))

			// Reads agree.
			li, err := in.Kubernetes.List(ctx, prefix, etcdkubernetes.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ls, err := sock.Kubernetes.List(ctx, prefix, etcdkubernetes.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, exp := kvs(li.Kvs), kvs(ls.Kvs); got != exp || li.Revision != ls.Revision || len(li.Kvs) != 5 {
				t.Errorf("list in-process %s @%d; through the socket %s @%d; want 5 keys, equal", got, li.Revision, exp, ls.Revision)
			}
			page, err := in.Kubernetes.List(ctx, prefix, etcdkubernetes.ListOptions{Limit: 2, Revision: li.Revision})
			if err != nil || len(page.Kvs) != 2 || kvs(page.Kvs) != kvs(li.Kvs[:2]) {
				t.Errorf("a page of 2 at %d: %s, %v; want %s", li.Revision, kvs(page.Kvs), err, kvs(li.Kvs[:2]))
			}
			streamed, err := in.GetStream(ctx, prefix, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			var chunks []string
			for r := range streamed {
				if r.Err() != nil {
					t.Fatalf("streamed list: %v", r.Err())
				}
				chunks = append(chunks, kvs(r.Kvs))
			}
			if fmt.Sprint(chunks) == "[]" || kvsJoined(chunks) != kvs(li.Kvs) {
				t.Errorf("streamed list: %v; want the list's %s", chunks, kvs(li.Kvs))
			}
			g, err := in.Kubernetes.Get(ctx, prefix+"cm-3", etcdkubernetes.GetOptions{})
			if err != nil || g.KV == nil || string(g.KV.Value) != "v3" || g.KV.ModRevision != revs[prefix+"cm-3"] {
				t.Errorf("get cm-3: %v, %v; want v3 at %d", g.KV, err, revs[prefix+"cm-3"])
			}

			// The watch saw every change, in order.
			var got []string
			for len(got) < len(want) {
				select {
				case wr := <-events:
					if err := wr.Err(); err != nil {
						t.Fatalf("watch: %v", err)
					}
					for _, e := range wr.Events {
						switch e.Type {
						case clientv3.EventTypePut:
							got = append(got, fmt.Sprintf("PUT %s %s @%d", e.Kv.Key, e.Kv.Value, e.Kv.ModRevision))
						default:
							got = append(got, fmt.Sprintf("DELETE %s @%d", e.Kv.Key, e.Kv.ModRevision))
						}
					}
				case <-ctx.Done():
					t.Fatalf("watch: got %q, want %q", got, want)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("watch events:\n got %q\nwant %q", got, want)
			}

			// Many watches from the first write on one stream of one client
			// (etcd's client multiplexes the watches of one context), opened
			// and closed while a writer writes: each sees every change up to
			// the last write. On etcd's unbuffered adapter, kine's answer to
			// one watch request and the client's next request waited for
			// each other forever (TestWatchConsistency hung that way).
			const more = 300
			wrote := make(chan int64, 1)
			go func() {
				var last int64
				for i := 0; i < more; i++ {
					r, err := sock.Kubernetes.OptimisticPut(ctx, fmt.Sprintf("%smore-%d", prefix, i), []byte("m"), 0, etcdkubernetes.PutOptions{})
					if err != nil || !r.Succeeded {
						t.Errorf("write %d: %v", i, err)
						break
					}
					last = r.Revision
				}
				wrote <- last
			}()
			var wg sync.WaitGroup
			replays := make([]int, 40)
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			defer rcancel()
			for i := range replays {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					wctx, wcancel := context.WithCancel(rctx)
					defer wcancel()
					for wr := range in.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start.Revision+1)) {
						replays[i] += len(wr.Events)
						if replays[i] >= len(want)+more {
							break
						}
					}
				}(i)
				time.Sleep(5 * time.Millisecond)
			}
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-time.After(45 * time.Second):
				t.Fatal("the replaying watches are stuck: the watch stream deadlocked")
			}
			<-wrote
			for i, n := range replays {
				if n != len(want)+more {
					t.Errorf("replaying watch %d got %d of %d events", i, n, len(want)+more)
				}
			}

			// Errors are the ones a socket client sees.
			errs := map[string]string{}
			for name, c := range map[string]*etcdkubernetes.Client{"in-process": in, "socket": sock} {
				_, err := c.KV.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
				if err == nil {
					t.Errorf("%s: a sorted range, which kine does not support, answered no error", name)
				} else {
					errs[name] = fmt.Sprintf("%v (code %s)", err, status.Code(err))
				}
				cctx, ccancel := context.WithCancel(ctx)
				ccancel()
				if _, err := c.KV.Get(cctx, prefix, clientv3.WithPrefix()); !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
					t.Errorf("%s: a cancelled range: %v; want canceled", name, err)
				}
			}
			if errs["in-process"] != errs["socket"] {
				t.Errorf("unsupported range: in-process %q, through the socket %q", errs["in-process"], errs["socket"])
			}
		})
	}
}

func kvs(list []*mvccpb.KeyValue) string {
	s := ""
	for _, kv := range list {
		s += fmt.Sprintf("%s=%s@%d,", kv.Key, kv.Value, kv.ModRevision)
	}
	return s
}

func kvsJoined(chunks []string) string {
	s := ""
	for _, c := range chunks {
		s += c
	}
	return s
}
