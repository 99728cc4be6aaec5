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
			"spec":   map[string]interface{}{"limits": map[string]interface{}{"objects": int64(5), "bytes": int64(9)}},
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
	if r.spec.limits != (tenancy.Limits{Objects: 5, Bytes: 9}) {
		t.Errorf("limits %+v", r.spec.limits)
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
