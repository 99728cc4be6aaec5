package restore

import (
	"context"
	"math"

	"golang.org/x/time/rate"
)

// PacedWriter is a Writer whose writes start at most PerSecond a second,
// together: one bound for every restore that writes through it (the
// server's, kcp start --restore-writes-per-second).
//
// The bound is for the other tenants. A restore's writes already yield to
// theirs at the datastore's writer, but each restored object is also a
// watch event that the API server's caches and kcp's controllers handle;
// unbounded, a restore makes as many as the datastore takes (about 2,000
// a second on SQLite on 2 cores) and the processor, not the datastore, is
// what the other tenants then wait for (docs/performance.md, "restore").
type PacedWriter struct {
	Writer
	PerSecond float64
	limiter   *rate.Limiter
}

// Paced is w with at most perSecond writes a second; perSecond <= 0
// (or not a number) is w itself, without a bound.
func Paced(w Writer, perSecond float64) Writer {
	if !(perSecond > 0) || math.IsInf(perSecond, 1) {
		return w
	}
	return &PacedWriter{Writer: w, PerSecond: perSecond, limiter: rate.NewLimiter(rate.Limit(perSecond), paceBurst(perSecond))}
}

// paceBurst is how many writes may start at once after a pause: 10 ms
// of the rate, at least one, so that the writes come evenly rather than
// in a second's worth at a time.
func paceBurst(perSecond float64) int {
	return max(1, int(math.Ceil(perSecond/100)))
}

// CreateRow waits for its turn, then writes.
func (p *PacedWriter) CreateRow(ctx context.Context, key string, value []byte) (bool, error) {
	if err := p.limiter.Wait(ctx); err != nil {
		return false, err
	}
	return p.Writer.CreateRow(ctx, key, value)
}

// UpdateRow waits for its turn, then writes.
func (p *PacedWriter) UpdateRow(ctx context.Context, key string, value []byte, revision int64) (bool, error) {
	if err := p.limiter.Wait(ctx); err != nil {
		return false, err
	}
	return p.Writer.UpdateRow(ctx, key, value, revision)
}

// DeleteRow waits for its turn, then writes.
func (p *PacedWriter) DeleteRow(ctx context.Context, key string, revision int64) (bool, error) {
	if err := p.limiter.Wait(ctx); err != nil {
		return false, err
	}
	return p.Writer.DeleteRow(ctx, key, revision)
}
