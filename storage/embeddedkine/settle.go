package embeddedkine

import (
	"context"
	"fmt"
	"time"

	kineserver "github.com/k3s-io/kine/pkg/server"
)

// settleKey is a key outside every workspace that Settle writes.
const settleKey = "/registry/kcp.io/revisionfloor/system:shard/settle"

// Settle returns a revision R such that every row of the datastore at or
// below R is there for good: a later read sees exactly the rows up to R
// that an earlier one saw, plus none. The newest id (MAX(id)) is not such
// a revision on PostgreSQL: an insert takes its id when it starts and
// becomes visible when it commits, so a row with a smaller id can appear
// after one with a larger. kine's poll reads the log in revision order
// and waits for (or fills) a missing revision before it goes on, so Settle
// writes a key and waits until the shared watch stream (fed by that poll)
// has handed on that write: every revision below it was seen or filled.
// A reader of "what changed after R" (a move's delta copy) misses nothing.
func (k *Kine) Settle(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s := k.fanout.sharedStream()
	if s == nil {
		return 0, fmt.Errorf("settling the datastore's revision: kine's watch is not running")
	}
	sub := &fanoutSub{events: make(chan kineserver.EventBatch, subCapacity), errc: make(chan error, 1)}
	if !s.add(sub) || !s.arm(ctx, sub, kineserver.EventBatch{}) {
		return 0, fmt.Errorf("settling the datastore's revision: kine's watch ended")
	}
	defer s.remove(sub, nil)
	// Registered before the write: the batch with the write comes to sub.
	rev, err := k.writeSettleKey(ctx)
	if err != nil {
		return 0, fmt.Errorf("settling the datastore's revision: %w", err)
	}
	for batch := range sub.events {
		if batch.CurrentRev >= rev {
			return rev, nil
		}
		for _, e := range batch.Events {
			if e != nil && e.KV != nil && e.KV.ModRevision >= rev {
				return rev, nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("settling the datastore's revision: kine's poll did not reach revision %d: %w", rev, err)
	}
	return 0, fmt.Errorf("settling the datastore's revision: kine's watch ended before revision %d", rev)
}

// writeSettleKey writes settleKey (created or updated; concurrent callers
// retry on each other's writes) and returns the write's revision.
func (k *Kine) writeSettleKey(ctx context.Context) (int64, error) {
	value := []byte(fmt.Sprintf(`{"at":%q}`, time.Now().UTC().Format(time.RFC3339Nano)))
	for attempt := 0; attempt < 20; attempt++ {
		_, old, err := k.GetKey(ctx, settleKey)
		if err != nil {
			return 0, err
		}
		if old == 0 {
			rev, exists, err := k.CreateKey(ctx, settleKey, value)
			if err != nil || !exists {
				return rev, err
			}
			continue
		}
		rev, ok, err := k.UpdateKey(ctx, settleKey, value, old)
		if err != nil || ok {
			return rev, err
		}
	}
	return 0, fmt.Errorf("%s kept changing", settleKey)
}
