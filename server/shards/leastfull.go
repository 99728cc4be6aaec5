package shards

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Policies of --workspace-shard-policy: where a new workspace goes when
// neither its Workspace (spec.shard) nor --workspace-shard names a shard.
const (
	// PolicyParent: the shard of its parent, which needs no call between
	// shards (the default).
	PolicyParent = "parent"
	// PolicyLeastFull: the shard that holds the fewest workspaces, among
	// those that answer.
	PolicyLeastFull = "least-full"
)

// Policies lists the policies, for help and errors.
var Policies = []string{PolicyParent, PolicyLeastFull}

// countsTTL is how long the shards' counts are used before they are asked
// again; in between, each choice counts itself, so a burst of creations
// spreads instead of all going to the shard that was least full.
const countsTTL = 10 * time.Second

// countTimeout bounds one shard's answer: a shard that is down or slow is
// not chosen, and does not hold up a creation for long.
const countTimeout = 2 * time.Second

// LeastFull chooses the shard that holds the fewest workspaces
// (LogicalClusters). Each shard's count is asked of that shard, this one
// included, as a peer: a list of LogicalClusters across all clusters with
// limit 1, whose items plus remainingItemCount are the count (the
// datastore counts; no object is read beyond the first).
type LeastFull struct {
	m     *Membership
	count func(ctx context.Context, shard string) (int64, error)

	mu     sync.Mutex
	asked  time.Time
	counts map[string]int64 // shards that answered
}

// NewLeastFull returns the policy for membership m.
func NewLeastFull(m *Membership) *LeastFull {
	l := &LeastFull{m: m}
	l.count = l.ask
	return l
}

// Choose returns the shard a new workspace goes to, and the counts it
// chose from (for messages and logs). If no shard answers it returns this
// shard.
func (l *LeastFull) Choose(ctx context.Context) (string, map[string]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil || time.Since(l.asked) > countsTTL {
		l.counts = l.askAll(ctx)
		l.asked = time.Now()
	}
	best, bestN := "", int64(-1)
	for _, name := range l.m.Config.Names() {
		n, ok := l.counts[name]
		if ok && (bestN < 0 || n < bestN) {
			best, bestN = name, n
		}
	}
	seen := make(map[string]int64, len(l.counts))
	for k, v := range l.counts {
		seen[k] = v
	}
	if best == "" {
		klog.InfoS("no shard told how many workspaces it holds; a new workspace stays on this shard", "shard", l.m.Self)
		return l.m.Self, seen
	}
	l.counts[best]++
	return best, seen
}

// askAll asks every shard at once.
func (l *LeastFull) askAll(ctx context.Context) map[string]int64 {
	ctx, cancel := context.WithTimeout(ctx, countTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]int64{}
	for _, name := range l.m.Config.Names() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := l.count(ctx, name)
			if err != nil {
				klog.V(2).InfoS("a shard did not tell how many workspaces it holds; it is not chosen for new workspaces until it does", "shard", name, "err", err)
				return
			}
			mu.Lock()
			out[name] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// ask is one shard's count of LogicalClusters.
func (l *LeastFull) ask(ctx context.Context, shard string) (int64, error) {
	cfg, err := l.m.Peer(shard)
	if err != nil {
		return 0, err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/clusters/*/apis/tenancy.kcp.io/v1alpha1/logicalclusters?limit=1", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s", resp.Status)
	}
	var list struct {
		Metadata struct {
			RemainingItemCount *int64 `json:"remainingItemCount"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	n := int64(len(list.Items))
	if list.Metadata.RemainingItemCount != nil {
		n += *list.Metadata.RemainingItemCount
	}
	return n, nil
}
