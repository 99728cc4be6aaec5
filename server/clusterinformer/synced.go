package clusterinformer

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// syncPoll is how often WaitForSync looks again.
const syncPoll = 5 * time.Millisecond

// WaitForSync is cache.WaitForCacheSync with a poll of 5 ms instead of
// 100 ms. The server's own informers list in process (server/localwatch,
// the loopback in memory), so most are synced within milliseconds of their
// start, and upstream's poll made each wait a tenth of a second: several
// such waits in a row were a fifth of a cold start, and a cluster's first
// request waited one out (docs/performance.md, "Start-up"). A look is a
// few atomic reads. It returns false when ctx ends first.
func WaitForSync(ctx context.Context, synced ...cache.InformerSynced) bool {
	err := wait.PollUntilContextCancel(ctx, syncPoll, true, func(context.Context) (bool, error) {
		for _, s := range synced {
			if !s() {
				return false, nil
			}
		}
		return true, nil
	})
	return err == nil
}
