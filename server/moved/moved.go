// Package moved stops a shard from serving a logical cluster that a move
// took to another shard (tenancy.MovedToAnnotation on its LogicalCluster):
// every request for it answers 503 Service Unavailable with Retry-After
// (through the front proxy the retry reaches the new shard), and the
// watches open on it end, so that their clients watch again through the
// front proxy, on the new shard, where a resourceVersion of this shard is
// older than the cluster's creation and answers 410 Gone (relist): no
// client misses a change or reads this shard's stale copy. kcp's own
// identities (the loopback, shards, system:masters) may still read and
// write its LogicalCluster, which the move needs.
package moved

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Watches are the open watches per cluster, to end them.
type Watches struct {
	mu sync.Mutex
	by map[logicalcluster.Name]map[*context.CancelFunc]struct{}
}

// NewWatches returns an empty set.
func NewWatches() *Watches {
	return &Watches{by: map[logicalcluster.Name]map[*context.CancelFunc]struct{}{}}
}

func (w *Watches) add(c logicalcluster.Name, cancel *context.CancelFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.by[c]
	if m == nil {
		m = map[*context.CancelFunc]struct{}{}
		w.by[c] = m
	}
	m[cancel] = struct{}{}
}

func (w *Watches) remove(c logicalcluster.Name, cancel *context.CancelFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := w.by[c]; m != nil {
		delete(m, cancel)
		if len(m) == 0 {
			delete(w.by, c)
		}
	}
}

// Close ends every open watch of c.
func (w *Watches) Close(c logicalcluster.Name) {
	w.mu.Lock()
	m := w.by[c]
	delete(w.by, c)
	w.mu.Unlock()
	for cancel := range m {
		(*cancel)()
	}
}

// Open is how many watches of c are open (tests).
func (w *Watches) Open(c logicalcluster.Name) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.by[c])
}

// kcpOwn reports whether u is kcp itself (its loopback, another shard, an
// operator).
func kcpOwn(u user.Info) bool {
	if u == nil {
		return false
	}
	if u.GetName() == user.APIServerUser {
		return true
	}
	g := u.GetGroups()
	return slices.Contains(g, user.SystemPrivilegedGroup) || slices.Contains(g, shards.PeersGroup)
}

// WithMoved answers for clusters that movedTo names a shard of, and
// registers watches with w.
func WithMoved(next http.Handler, movedTo func(logicalcluster.Name) string, w *Watches) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		c, ok := logicalcluster.From(ctx)
		if !ok || c.IsWildcard() || c == logicalcluster.Root {
			next.ServeHTTP(rw, r)
			return
		}
		info, _ := request.RequestInfoFrom(ctx)
		if to := movedTo(c); to != "" {
			u, _ := request.UserFrom(ctx)
			if info != nil && info.IsResourceRequest && info.APIGroup == tenancy.Group && info.Resource == tenancy.LogicalClustersResource.Resource && kcpOwn(u) && info.Verb != "watch" {
				next.ServeHTTP(rw, r)
				return
			}
			refuse(rw, c, to)
			return
		}
		if info == nil || info.Verb != "watch" {
			next.ServeHTTP(rw, r)
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w.add(c, &cancel)
		defer w.remove(c, &cancel)
		if to := movedTo(c); to != "" {
			// Marked between the check and the registration.
			refuse(rw, c, to)
			return
		}
		next.ServeHTTP(rw, r.WithContext(wctx))
	})
}

func refuse(w http.ResponseWriter, c logicalcluster.Name, to string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("the workspace %s moved to shard %s: this shard no longer serves it; retry through the front proxy", c, to)})
}
