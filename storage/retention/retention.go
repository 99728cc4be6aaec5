// Package retention runs the age-based pruning of kcp's own SQL tables
// (change history, audit events): every tenth of the retention, between one
// second and ten minutes, it deletes what is older than the retention.
package retention

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// Prune deletes what is older than before and reports how many rows went.
type Prune func(ctx context.Context, before time.Time) (int64, error)

// Keep runs prune until ctx ends; what names the table in log lines.
func Keep(ctx context.Context, what string, retention time.Duration, prune Prune) {
	every := min(max(retention/10, time.Second), 10*time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := prune(ctx, time.Now().Add(-retention)); err != nil {
				klog.ErrorS(err, "pruning", "table", what)
			} else if n > 0 {
				klog.V(2).InfoS("pruned", "table", what, "rows", n)
			}
		}
	}
}
