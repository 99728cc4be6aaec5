package logicalclusters

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/datastore/datastoretest"
	"github.com/kcpsql/kcp/storage/embeddedkine/kinetest"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestRegistryFollowsTheDatastore: the registry, listing and watching
// LogicalClusters straight from the datastore as the server runs it
// (ReadStored with kine's Range and Watch; its loopback is never called),
// knows the clusters stored before it started and follows every later
// change: a new cluster exists, a terminating one is reported so with its
// new limits, a deleted one is gone, one created again exists again.
func TestRegistryFollowsTheDatastore(t *testing.T) {
	for _, d := range datastoretest.Dialects {
		t.Run(d.Name, func(t *testing.T) {
			k := kinetest.Start(t, d.DSN(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			key := func(c logicalcluster.Name) string { return storedPrefix + string(c) + "/" + tenancy.LogicalClusterName }
			value := func(c logicalcluster.Name, phase string, objects int64) []byte {
				return []byte(fmt.Sprintf(`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"LogicalCluster","metadata":{"name":"cluster","uid":"u-%s",`+
					`"annotations":{"kcp.io/cluster":%q,%q:"{\"username\":\"alice\"}"}},"spec":{"limits":{"objects":%d}},"status":{"phase":%q}}`,
					c, c, tenancy.OwnerAnnotation, objects, phase))
			}
			create := func(c logicalcluster.Name) {
				t.Helper()
				if _, exists, err := k.CreateKey(ctx, key(c), value(c, tenancy.PhaseReady, 0)); err != nil || exists {
					t.Fatalf("storing %s: exists %v, %v", c, exists, err)
				}
			}
			create("root:before")

			r := New()
			r.ReadStored(k.Range, k.Watch)
			// Nothing listens there: every read must come from the datastore.
			if err := r.Start(ctx, &rest.Config{Host: "https://127.0.0.1:1"}); err != nil {
				t.Fatal(err)
			}
			if !r.Synced() || !r.Exists("root:before") || r.Owner("root:before") != "alice" {
				t.Fatalf("after start: synced %v, root:before exists %v, owner %q", r.Synced(), r.Exists("root:before"), r.Owner("root:before"))
			}
			eventually := func(what string, cond func() bool) {
				t.Helper()
				for !cond() {
					select {
					case <-ctx.Done():
						t.Fatalf("the registry never saw %s", what)
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
			create("root:after")
			eventually("root:after created", func() bool { return r.Exists("root:after") })

			_, rev, err := k.GetKey(ctx, key("root:after"))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok, err := k.UpdateKey(ctx, key("root:after"), value("root:after", tenancy.PhaseTerminating, 9), rev); err != nil || !ok {
				t.Fatalf("update: %v %v", ok, err)
			}
			eventually("root:after terminating with limit 9", func() bool {
				exists, terminating := r.State("root:after")
				return exists && terminating && r.Limits("root:after").Objects == 9
			})

			_, rev, err = k.GetKey(ctx, key("root:after"))
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := k.DeleteKey(ctx, key("root:after"), rev); err != nil || !ok {
				t.Fatalf("delete: %v %v", ok, err)
			}
			eventually("root:after deleted", func() bool { exists, _ := r.State("root:after"); return !exists })
			if !r.Exists("root:before") {
				t.Fatal("root:before is gone after another cluster was deleted")
			}
			create("root:after")
			eventually("root:after created again", func() bool { return r.Exists("root:after") })
		})
	}
}
