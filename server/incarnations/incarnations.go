// Package incarnations keeps each incarnation of a logical cluster name from
// reading the revisions of an earlier one. A deleted workspace's objects
// stay in the datastore's history until compaction, under the same keys a
// recreated workspace of the same name uses; a read at an old resource
// version (get, list with Exact or NotOlderThan, a continue token) or a
// watch from one would show them to the new owner. Every incarnation begins
// at the revision that created its LogicalCluster object (the workspace
// controller creates it before anything else in the cluster), and requests
// that read the past from before that (a watch, an exact or paged list, a
// continue token) answer 410 Gone, as if the history had been compacted.
package incarnations

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Tracker knows the revision at which each cluster's current incarnation
// began.
type Tracker struct {
	// CreateRevision returns the datastore revision that created the
	// cluster's LogicalCluster object, or an error if there is none.
	CreateRevision func(context.Context, logicalcluster.Name) (int64, error)
}

// Began returns the first revision of the cluster's current incarnation; 0
// for clusters that are never recreated (root, the system cluster).
//
// It asks the datastore every time rather than caching by the LogicalCluster
// informer's UID: in the moments after a name is reused, the informer may
// still show the old incarnation, and a cached start would let reads into
// the old history through. Only requests that read the past come here
// (watches from a revision, exact and paged lists, continue tokens), and
// the lookup is one indexed read of one key.
func (t *Tracker) Began(ctx context.Context, c logicalcluster.Name) (int64, error) {
	if c == logicalcluster.Root || c == logicalcluster.SystemCRDs || c.IsWildcard() {
		return 0, nil
	}
	return t.CreateRevision(ctx, c)
}

// historicRevision is the revision a request asks to read the past at: the
// resourceVersion of a watch, of a list with resourceVersionMatch=Exact or
// of a paged list without a match (which upstream serves exactly at that
// revision), or the revision in a continue token; 0 if it reads the present.
// Reads "not older than" a revision (get, list with NotOlderThan) answer with
// the current state, which is the current incarnation's, and are left alone.
func historicRevision(r *http.Request) int64 {
	q := r.URL.Query()
	var rev int64
	if v, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64); err == nil && v > 0 {
		verb := ""
		if info, ok := request.RequestInfoFrom(r.Context()); ok && info.IsResourceRequest {
			verb = info.Verb
		}
		limit, _ := strconv.ParseInt(q.Get("limit"), 10, 64)
		match := q.Get("resourceVersionMatch")
		switch {
		case verb == "watch" || q.Get("watch") == "1" || q.Get("watch") == "true":
			rev = v
		case verb == "list" && (match == string(metav1.ResourceVersionMatchExact) || (match == "" && limit > 0)):
			rev = v
		}
	}
	if c := q.Get("continue"); c != "" {
		// Upstream's continue token: base64url of {"v":...,"rv":N,"start":...}.
		if raw, err := base64.RawURLEncoding.DecodeString(c); err == nil {
			var tok struct {
				RV int64 `json:"rv"`
			}
			if json.Unmarshal(raw, &tok) == nil && tok.RV > 0 && (rev == 0 || tok.RV < rev) {
				rev = tok.RV
			}
		}
	}
	return rev
}

// WithIncarnations answers 410 Gone to requests in a logical cluster that
// name a resource version from before the cluster's current incarnation.
// It runs after authorization, so only those allowed into the cluster learn
// anything about its history.
func WithIncarnations(next http.Handler, t *Tracker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rev := historicRevision(r)
		c, ok := logicalcluster.From(r.Context())
		if rev == 0 || !ok {
			next.ServeHTTP(w, r)
			return
		}
		began, err := t.Began(r.Context(), c)
		if err != nil {
			// Fail closed: without the start of the incarnation, old history
			// could show.
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("cannot tell where logical cluster %s's history begins: %v; retry, or read without a resourceVersion", c, err))
			return
		}
		if rev < began {
			writeStatus(w, http.StatusGone, metav1.StatusReasonExpired,
				fmt.Sprintf("resource version %d is from before logical cluster %s was created (at %d): too old; list again without a resourceVersion or continue token", rev, c, began))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
}
