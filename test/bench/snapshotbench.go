package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/tenancy"
)

var (
	snapshotOnly       = flag.Bool("snapshot", false, "only the snapshot benchmark: another tenant's write latency while a WorkspaceSnapshot copies a large workspace")
	snapshotSizes      = flag.String("snapshot-sizes", "20000", "objects per snapshotted workspace in -snapshot (comma-separated)")
	snapshotDatastores = flag.String("snapshot-datastores", "sqlite,postgres", "datastores of -snapshot")
)

type snapshotResult struct {
	datastore            string
	objects              int64
	took                 time.Duration
	otherBefore, otherIn []time.Duration
}

func benchSnapshots(log func(string, ...any)) ([]snapshotResult, error) {
	return eachSize(*snapshotDatastores, *snapshotSizes, "-snapshot-sizes", "snapshot", log, func(d string, n int) (snapshotResult, error) {
		return snapshotOnce(d, n, log)
	})
}

// snapshotOnce fills a workspace with n config maps, then has a
// WorkspaceSnapshot copy it while another workspace's client creates
// config maps one after another; it compares that client's latencies
// with the 5 seconds before.
func snapshotOnce(d string, n int, log func(string, ...any)) (snapshotResult, error) {
	r := snapshotResult{datastore: d}
	s, stop, err := restoreServer(d, nil)
	if err != nil {
		return r, err
	}
	defer stop()
	if err := s.createWorkspaces([][2]string{{"root", "big"}, {"root", "other"}}); err != nil {
		return r, err
	}
	if _, err := fill(s, "root:big", n, nil); err != nil {
		return r, err
	}
	other, err := s.client("root:other")
	if err != nil {
		return r, err
	}
	stopProbe := make(chan struct{})
	go func() { time.Sleep(5 * time.Second); close(stopProbe) }()
	r.otherBefore = probe(other, "before", stopProbe)

	root, err := s.dynamic("root")
	if err != nil {
		return r, err
	}
	snaps := root.Resource(tenancy.WorkspaceSnapshotsResource)
	ctx := context.Background()
	inStop := make(chan struct{})
	in := make(chan []time.Duration)
	go func() { in <- probe(other, "during", inStop) }()
	t0 := time.Now()
	finish := func() { close(inStop); r.otherIn = <-in }
	if _, err := snaps.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "WorkspaceSnapshot",
		"metadata": map[string]interface{}{"name": "bench"},
		"spec":     map[string]interface{}{"workspace": "big"},
	}}, metav1.CreateOptions{}); err != nil {
		finish()
		return r, err
	}
	for {
		got, err := snaps.Get(ctx, "bench", metav1.GetOptions{})
		if err != nil {
			finish()
			return r, err
		}
		list, _, _ := unstructured.NestedSlice(got.Object, "status", "snapshots")
		if len(list) > 0 {
			r.took = time.Since(t0)
			finish()
			r.objects, _ = list[0].(map[string]interface{})["objects"].(int64)
			log("snapshot: %s, %d objects", r.took.Round(time.Millisecond), r.objects)
			return r, nil
		}
		if time.Since(t0) > 10*time.Minute {
			finish()
			return r, fmt.Errorf("no snapshot after 10 minutes: %v", got.Object["status"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func renderSnapshots(rs []snapshotResult) string {
	var b strings.Builder
	b.WriteString("| datastore | objects | snapshot (create -> listed) | another tenant's create p50 / p99 / max, before | while the snapshot is taken |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %s | %s / %s / %s (%d) | %s / %s / %s (%d) |\n", r.datastore, r.objects, r.took.Round(10*time.Millisecond),
			pct(r.otherBefore, .5).Round(100*time.Microsecond), pct(r.otherBefore, .99).Round(100*time.Microsecond), slices.Max(append(r.otherBefore, 0)).Round(100*time.Microsecond), len(r.otherBefore),
			pct(r.otherIn, .5).Round(100*time.Microsecond), pct(r.otherIn, .99).Round(100*time.Microsecond), slices.Max(append(r.otherIn, 0)).Round(100*time.Microsecond), len(r.otherIn))
	}
	return b.String()
}
