package embeddedkine

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	kineserver "github.com/k3s-io/kine/pkg/server"
	"k8s.io/klog/v2"
)

// Health tracks whether the datastore stores writes. A write that the
// datastore did not store makes the server unready (/readyz "datastore-writes")
// until a write succeeds again; while unready, the check itself tries a small
// write at most every probeEvery, so that a server taken out of rotation by
// its readiness probe still notices the datastore's recovery.
type Health struct {
	backend kineserver.Backend
	dataDir string // SQLite's directory: its free space goes into the reason

	// failing is read on every successful write without the lock; the
	// rest changes only while writes fail.
	failing   atomic.Bool
	mu        sync.Mutex
	since     time.Time
	lastErr   error
	lastLog   time.Time
	lastProbe time.Time
}

const (
	probeEvery = 2 * time.Second
	logEvery   = 5 * time.Second
	probeKey   = "/kcp.io/write-probe"
)

func (h *Health) failed(err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.failing.Load() {
		h.failing.Store(true)
		h.since = time.Now()
	}
	h.lastErr = err
	if time.Since(h.lastLog) >= logEvery {
		h.lastLog = time.Now()
		klog.ErrorS(err, "the datastore did not store a write; requests get 503 and /readyz fails until writes succeed again"+h.diskNote())
	}
}

func (h *Health) succeeded() {
	if h == nil || !h.failing.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failing.Load() {
		klog.InfoS("the datastore stores writes again", "failingFor", time.Since(h.since).Round(time.Millisecond))
		h.failing.Store(false)
	}
}

// diskNote says how much space is left where SQLite writes, the usual cause
// of writes failing on SQLite.
func (h *Health) diskNote() string {
	if h.dataDir == "" {
		return ""
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(h.dataDir, &st); err != nil {
		return ""
	}
	free := st.Bavail * uint64(st.Bsize)
	if free < 1<<20 {
		return fmt.Sprintf(" (the disk holding %s is full: %d bytes free)", h.dataDir, free)
	}
	return fmt.Sprintf(" (%d MiB free on the disk holding %s)", free>>20, h.dataDir)
}

// Name is the check's name under /readyz.
func (h *Health) Name() string { return "datastore-writes" }

// Check fails while the datastore does not store writes.
func (h *Health) Check(r *http.Request) error {
	h.mu.Lock()
	failing, since, lastErr := h.failing.Load(), h.since, h.lastErr
	probe := failing && time.Since(h.lastProbe) >= probeEvery
	if probe {
		h.lastProbe = time.Now()
	}
	h.mu.Unlock()
	if !failing {
		return nil
	}
	if probe && h.probe(r.Context()) {
		h.succeeded()
		return nil
	}
	return fmt.Errorf("writes to the datastore have failed since %s: %v%s", since.UTC().Format(time.RFC3339), lastErr, h.diskNote())
}

// probe writes and deletes one small key through the checked backend.
func (h *Health) probe(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b := checkedWrites{Backend: h.backend}
	key := fmt.Sprintf("%s/%d", probeKey, time.Now().UnixNano())
	rev, err := b.Create(ctx, key, []byte("probe"), 0)
	if err != nil {
		return false
	}
	_, _, _, _ = b.Delete(ctx, key, rev)
	return true
}
