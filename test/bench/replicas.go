package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// latencyResult is write-to-event latency of one setup.
type latencyResult struct {
	setup    string
	p50, p99 time.Duration
	samples  int
}

// benchWatchLatency writes through replica a and measures when a watch on
// replica b (or on a itself when b is a) sees each write.
func benchWatchLatency(a, b *server, setup string, samples int) (latencyResult, error) {
	r := latencyResult{setup: setup, samples: samples}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ca, err := a.client("root")
	if err != nil {
		return r, err
	}
	cb, err := b.client("root")
	if err != nil {
		return r, err
	}
	ns := fmt.Sprintf("lat-%d", time.Now().UnixNano())
	if _, err := ca.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return r, err
	}
	// Wait until b sees the namespace, then watch.
	for {
		if _, err := cb.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	w, err := cb.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return r, err
	}
	defer w.Stop()
	lat := make([]time.Duration, 0, samples)
	for i := 0; i < samples; i++ {
		name := fmt.Sprintf("cm-%d", i)
		start := time.Now()
		if _, err := ca.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return r, err
		}
		for {
			ev, ok := <-w.ResultChan()
			if !ok {
				return r, fmt.Errorf("watch closed")
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && cm.Name == name {
				lat = append(lat, time.Since(start))
				break
			}
		}
		time.Sleep(time.Duration(i%7) * 13 * time.Millisecond) // do not phase-lock with the poller
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r, nil
}

// startReplica starts another kcp on a's datastore with a's identity files.
func startReplica(a *server, dir string, extra ...string) (*server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := copyIdentity(a.dir, dir); err != nil {
		return nil, err
	}
	b := &server{dir: dir, port: freePort(), ds: a.ds, extra: extra}
	_, err := b.start()
	return b, err
}

// runLatency measures watch latency on one replica and across two replicas
// on PostgreSQL, with and without LISTEN/NOTIFY.
func runLatency(log func(string, ...any)) ([]latencyResult, error) {
	tmp, err := os.MkdirTemp("", "kcp-bench-lat-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var out []latencyResult
	for _, notify := range []bool{true, false} {
		dsn, drop, err := freshPostgres()
		if err != nil {
			return nil, err
		}
		flag := fmt.Sprintf("--datastore-notify=%v", notify)
		a := &server{dir: filepath.Join(tmp, fmt.Sprintf("a-%v", notify)), port: freePort(), ds: dsn, extra: []string{flag}}
		if _, err := a.start(); err != nil {
			drop()
			return nil, err
		}
		b, err := startReplica(a, filepath.Join(tmp, fmt.Sprintf("b-%v", notify)), flag)
		if err != nil {
			a.stop()
			drop()
			return nil, err
		}
		label := "PostgreSQL, LISTEN/NOTIFY on"
		if !notify {
			label = "PostgreSQL, LISTEN/NOTIFY off (poll every 1 s)"
		}
		same, err := benchWatchLatency(a, a, "same replica, "+label, *latencySamples)
		if err == nil {
			out = append(out, same)
			var across latencyResult
			across, err = benchWatchLatency(a, b, "across replicas, "+label, *latencySamples)
			out = append(out, across)
			log("%s: same p50 %s p99 %s; across p50 %s p99 %s", label, same.p50, same.p99, across.p50, across.p99)
		}
		b.stop()
		a.stop()
		drop()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// copyIdentity copies what servers of one installation share (the CA,
// the admin's certificate and the service-account key) from one root
// directory into another.
func copyIdentity(from, to string) error {
	for _, f := range []string{"ca.crt", "ca.key", "admin.crt", "admin.key", "service-account.key"} {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
