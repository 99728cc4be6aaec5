package clusterinformer_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestWatchStored: a watch of stored objects (WatchStored over kine's
// watch) continues a ListStored list as the API server's watch would for
// a cache: every later change below the prefix as an event of the right
// type whose object has the change's resourceVersion and the cluster of
// its key; a deletion carries the object as it was; other resources'
// changes never come. A watch from a compacted resourceVersion answers
// 410 Expired (an informer then lists again) and ends; a watch without a
// resourceVersion is refused.
func TestWatchStored(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			k := kinetest.StartCompactingOnRequest(t, d.DSN(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const prefix = "/registry/example.kcp.io/things/"
			object := func(key string, value []byte) (*unstructured.Unstructured, error) {
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(value); err != nil {
					return nil, fmt.Errorf("%s: %w", key, err)
				}
				return u, nil
			}
			value := func(name, color string) []byte {
				return []byte(`{"apiVersion":"example.kcp.io/v1","kind":"Thing","metadata":{"name":"` + name + `"},"spec":{"color":"` + color + `"}}`)
			}
			if _, _, err := k.CreateKey(ctx, prefix+"root:a/one", value("one", "red")); err != nil {
				t.Fatal(err)
			}
			list, err := clusterinformer.ListStored(ctx, k.Range, prefix, "example.kcp.io/v1", "ThingList", object)
			if err != nil || len(list.Items) != 1 {
				t.Fatalf("list: %v, %d items", err, len(list.Items))
			}
			w, err := clusterinformer.WatchStored(ctx, k.Watch, prefix, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}, object)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()

			type want struct {
				t       watch.EventType
				cluster logicalcluster.Name
				name    string
				color   string
				rev     int64
			}
			var wants []want
			rev, _, err := k.CreateKey(ctx, prefix+"root:b/two", value("two", "blue"))
			if err != nil {
				t.Fatal(err)
			}
			wants = append(wants, want{watch.Added, "root:b", "two", "blue", rev})
			if _, _, err := k.CreateKey(ctx, "/registry/example.kcp.io/others/root:a/x", value("x", "grey")); err != nil {
				t.Fatal(err)
			}
			_, oneRev, err := k.GetKey(ctx, prefix+"root:a/one")
			if err != nil {
				t.Fatal(err)
			}
			rev, ok, err := k.UpdateKey(ctx, prefix+"root:a/one", value("one", "green"), oneRev)
			if err != nil || !ok {
				t.Fatalf("update: %v %v", ok, err)
			}
			wants = append(wants, want{watch.Modified, "root:a", "one", "green", rev})
			if ok, err := k.DeleteKey(ctx, prefix+"root:a/one", rev); err != nil || !ok {
				t.Fatalf("delete: %v %v", ok, err)
			}
			for i, wt := range wants {
				select {
				case e, open := <-w.ResultChan():
					if !open {
						t.Fatalf("event %d: the watch ended", i)
					}
					u, isU := e.Object.(*unstructured.Unstructured)
					if !isU {
						t.Fatalf("event %d: %s %T", i, e.Type, e.Object)
					}
					color, _, _ := unstructured.NestedString(u.Object, "spec", "color")
					if e.Type != wt.t || clusterinformer.ClusterOf(u) != wt.cluster || u.GetName() != wt.name || color != wt.color ||
						u.GetResourceVersion() != fmt.Sprint(wt.rev) {
						t.Fatalf("event %d: %s %s|%s %s at %s, want %+v", i, e.Type, clusterinformer.ClusterOf(u), u.GetName(), color, u.GetResourceVersion(), wt)
					}
				case <-ctx.Done():
					t.Fatalf("event %d (%+v) never came", i, wt)
				}
			}
			// The deletion: the object as it was, at a later revision.
			select {
			case e := <-w.ResultChan():
				u, _ := e.Object.(*unstructured.Unstructured)
				color, _, _ := unstructured.NestedString(u.Object, "spec", "color")
				at, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
				if e.Type != watch.Deleted || u.GetName() != "one" || color != "green" || clusterinformer.ClusterOf(u) != "root:a" || at <= rev {
					t.Fatalf("deletion: %s %s %s at %s (updated at %d)", e.Type, u.GetName(), color, u.GetResourceVersion(), rev)
				}
			case <-ctx.Done():
				t.Fatal("the deletion never came")
			}

			// From a compacted resourceVersion: 410, then the end.
			_, latest, err := k.GetKey(ctx, "/registry/example.kcp.io/others/root:a/x")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k.Client().Compact(ctx, latest); err != nil {
				t.Fatal(err)
			}
			old, err := clusterinformer.WatchStored(ctx, k.Watch, prefix, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}, object)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case e := <-old.ResultChan():
				s, isStatus := e.Object.(*metav1.Status)
				if e.Type != watch.Error || !isStatus || s.Code != http.StatusGone || s.Reason != metav1.StatusReasonExpired {
					t.Fatalf("watch from compacted %s: %s %+v, want an error event 410 Expired", list.GetResourceVersion(), e.Type, e.Object)
				}
			case <-ctx.Done():
				t.Fatal("no answer from a watch from a compacted revision")
			}
			select {
			case e, open := <-old.ResultChan():
				if open {
					t.Fatalf("after the error: %s %v", e.Type, e.Object)
				}
			case <-ctx.Done():
				t.Fatal("the watch did not end after its error")
			}

			for _, rv := range []string{"", "0", "x"} {
				if _, err := clusterinformer.WatchStored(ctx, k.Watch, prefix, metav1.ListOptions{ResourceVersion: rv}, object); err == nil {
					t.Errorf("a watch from resourceVersion %q was accepted", rv)
				}
			}
		})
	}
}
