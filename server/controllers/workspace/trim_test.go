package workspace

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Only a Ready Workspace with the finalizer and no deletion is cached in
// compact form; the controller needs whole objects for everything else.
func TestTrimReady(t *testing.T) {
	ws := func(phase string, finalizer, deleting bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]interface{}{
			"spec": map[string]interface{}{"limits": map[string]interface{}{"objects": int64(5), "bytes": int64(9)},
				"frozen": map[string]interface{}{"reason": "incident"}},
			"status": map[string]interface{}{"phase": phase},
		}}
		u.SetName("w")
		u.SetAnnotations(map[string]string{logicalcluster.Annotation: "root:team"})
		if finalizer {
			u.SetFinalizers([]string{tenancy.WorkspaceFinalizer})
		}
		if deleting {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		}
		return u
	}
	for _, u := range []*unstructured.Unstructured{
		ws(tenancy.PhaseInitializing, true, false),
		ws(tenancy.PhaseReady, false, false),
		ws(tenancy.PhaseReady, true, true),
	} {
		if got, _ := trimReady(u); got != u {
			t.Errorf("%v (finalizers %v, deleting %v) was trimmed to %T", u.Object["status"], u.GetFinalizers(), u.GetDeletionTimestamp() != nil, got)
		}
	}
	got, _ := trimReady(ws(tenancy.PhaseReady, true, false))
	r, ok := got.(*readyWorkspace)
	if !ok {
		t.Fatalf("a ready workspace is cached as %T", got)
	}
	if r.spec != (copied{limits: tenancy.Limits{Objects: 5, Bytes: 9}, frozen: "incident"}) {
		t.Errorf("copied %+v", r.spec)
	}
	if key, err := clusterinformer.KeyFunc(r); err != nil || key != clusterinformer.Key("root:team", "", "w") {
		t.Errorf("key %q, %v", key, err)
	}
}

// The sweep queues the Ready Workspaces whose limits differ from their
// LogicalCluster's (the first list does not queue Ready ones), and only
// once those limits are known.
func TestSweepQueuesDifferingLimits(t *testing.T) {
	ix := cache.NewIndexer(clusterinformer.KeyFunc, cache.Indexers{})
	for _, w := range []*readyWorkspace{
		{Ref: clusterinformer.Ref{Cluster: "root", Name: "same"}, spec: copied{limits: tenancy.Limits{Objects: 5}}},
		{Ref: clusterinformer.Ref{Cluster: "root", Name: "changed"}, spec: copied{limits: tenancy.Limits{Objects: 7}}},
	} {
		if err := ix.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	synced := false
	c := &Controller{queue: worker.NewQueue[string]("test"), indexer: ix, limitsSynced: func() bool { return synced },
		r: &reconciler{limits: func(logicalcluster.Name) tenancy.Limits { return tenancy.Limits{Objects: 5} }}}
	c.sweep(context.Background())
	if c.queue.Len() != 0 {
		t.Fatalf("queued %d before the limits were known", c.queue.Len())
	}
	synced = true
	c.sweep(context.Background())
	if c.queue.Len() != 1 {
		t.Fatalf("queued %d, want 1", c.queue.Len())
	}
	if key, _ := c.queue.Get(); key != clusterinformer.Key("root", "", "changed") {
		t.Errorf("queued %q", key)
	}
}

// The sweep also queues the Ready Workspaces whose freeze differs from
// their LogicalCluster's: frozen, unfrozen, or with another reason.
func TestSweepQueuesDifferingFreeze(t *testing.T) {
	ix := cache.NewIndexer(clusterinformer.KeyFunc, cache.Indexers{})
	for _, w := range []*readyWorkspace{
		{Ref: clusterinformer.Ref{Cluster: "root", Name: "same"}, spec: copied{frozen: "incident"}},
		{Ref: clusterinformer.Ref{Cluster: "root", Name: "reason"}, spec: copied{frozen: "another"}},
		{Ref: clusterinformer.Ref{Cluster: "root", Name: "unfrozen"}},
		{Ref: clusterinformer.Ref{Cluster: "root", Name: "plain"}},
	} {
		if err := ix.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	has := map[logicalcluster.Name]string{"root:same": "incident", "root:reason": "incident", "root:unfrozen": "incident"}
	c := &Controller{queue: worker.NewQueue[string]("test"), indexer: ix,
		r: &reconciler{limits: func(logicalcluster.Name) tenancy.Limits { return tenancy.Limits{} }, frozen: func(n logicalcluster.Name) string { return has[n] }}}
	c.sweep(context.Background())
	got := map[string]bool{}
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		got[key] = true
	}
	if len(got) != 2 || !got[clusterinformer.Key("root", "", "reason")] || !got[clusterinformer.Key("root", "", "unfrozen")] {
		t.Errorf("queued %v", got)
	}
}
