package embeddedkine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// Watch calls fn with every change of a key below prefix after revision,
// in revision order, through kine's log as the API server's watches see
// it (the shared stream of fanout): the change's type (Added for a key
// created, Modified, Deleted), its key, the value (for a deletion, the
// value the key had) and the change's revision. It is for the server's
// own caches of its own resources, which read a few fields of every
// object and, through the API server, would have every change decoded,
// completed and encoded for them to decode it again (custom resources
// have no watch cache); they list with Range and continue here from the
// list's revision.
//
// Watch returns when ctx ends (nil), when fn fails (its error), or when
// the watch ends: nil when kine ended it (too slow a reader; the caller
// watches again from the last revision fn saw, as the API server's
// storage does), kine's error when the datastore failed, and an error for
// which apierrors.IsResourceExpired holds when revision is older than
// what kine keeps (compacted): the caller lists again.
func (k *Kine) Watch(ctx context.Context, prefix string, revision int64,
	fn func(t watch.EventType, key string, value []byte, revision int64) error) error {
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("watch %q: a prefix ends in /", prefix)
	}
	ctx, cancel := context.WithCancel(ctx)
	wr := k.fanout.Watch(ctx, revision+1)
	defer func() {
		cancel()
		for range wr.Eventc { // let the watch's goroutines finish
		}
	}()
	if wr.CompactRevision != 0 {
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", revision, wr.CompactRevision))
	}
	for batch := range wr.Eventc {
		for _, e := range batch.Events {
			if e == nil || e.KV == nil || e.KV.ModRevision <= revision || !strings.HasPrefix(e.KV.Key, prefix) {
				continue
			}
			t, value := watch.Modified, e.KV.Value
			switch {
			case e.Delete:
				t = watch.Deleted
				if e.PrevKV != nil && len(e.PrevKV.Value) > 0 {
					value = e.PrevKV.Value
				}
			case e.Create:
				t = watch.Added
			}
			if err := fn(t, e.KV.Key, value, e.KV.ModRevision); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	select {
	case err := <-wr.Errorc:
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	default:
		return nil
	}
}
