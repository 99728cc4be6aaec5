// Package routing owns the outermost filter of the handler chain: it takes the
// logical cluster from /clusters/<path>/ (root when there is no prefix),
// validates it, strips the prefix and puts the cluster into the request
// context. Without a prefix, an API request carrying one of kcp's
// service-account tokens goes to the cluster the token was issued in (a
// pod's in-cluster configuration has no path); nothing else (no other
// header, no query parameter) selects a cluster.
package routing

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/server/errorlimit"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const prefix = "/clusters"

// Split parses an escaped request path into its logical cluster and the
// escaped path that follows. The cluster segment is unescaped before it is
// validated, so an encoded '/' or ':' cannot smuggle another path in.
func Split(escapedPath string) (logicalcluster.Name, string, error) {
	rest, ok := strings.CutPrefix(escapedPath, prefix)
	if !ok || (rest != "" && rest[0] != '/') {
		return logicalcluster.Root, escapedPath, nil
	}
	rest = strings.TrimPrefix(rest, "/")
	segment, tail, found := strings.Cut(rest, "/")
	if segment == "" {
		return "", "", fmt.Errorf("missing logical cluster name after %s/", prefix)
	}
	raw, err := url.PathUnescape(segment)
	if err != nil {
		return "", "", fmt.Errorf("logical cluster name %q is not a valid path segment", segment)
	}
	name, err := logicalcluster.Parse(raw)
	if err != nil {
		return "", "", err
	}
	if !found {
		return name, "/", nil
	}
	return name, "/" + tail, nil
}

// WithLogicalCluster is the routing filter.
func WithLogicalCluster(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cluster, rest, err := Split(req.URL.EscapedPath())
		if err != nil {
			if errorlimit.IsDiscovery(req.Method, afterCluster(req.URL.Path)) {
				// client-go's discovery reads only a text/plain answer's
				// words (errorlimit), and keeps them only for a 403 (a
				// 400's become "the server rejected our request for an
				// unknown reason"). No workspace can have this name: it
				// is answered as one that does not exist is.
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprintf(w, "%v: no workspace has this name\n", err)
				return
			}
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
		if rest == req.URL.EscapedPath() {
			// No /clusters/ prefix: a pod's in-cluster client (its
			// configuration names a host and port, never a path) reaches
			// the workspace its service-account token was issued in.
			if c, ok := TokenCluster(req); ok {
				cluster = c
			}
		}
		if strings.HasPrefix(rest, prefix+"/") {
			// The prefix twice: a client whose server URL already ends
			// in /clusters/<name> following a server-relative URL the
			// server gave it (OpenAPI v3's index, kubectl get --raw).
			// The same cluster is that cluster. Another stays a path of
			// the first cluster, which serves nothing there (404, and
			// audited as sent).
			if inner, innerRest, err := Split(rest); err == nil && inner == cluster {
				rest = innerRest
			}
		}
		if cluster.IsWildcard() {
			switch req.Method {
			case http.MethodGet, http.MethodHead:
			default:
				writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
					fmt.Sprintf("%s is not allowed across all logical clusters (/clusters/*): only get, list and watch are", req.Method))
				return
			}
			if StockInformerRequest(req.URL.Query()) {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, StockInformerMessage)
				return
			}
		}
		path, err := url.PathUnescape(rest)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("invalid path %q", rest))
			return
		}
		u := *req.URL
		u.Path = path
		u.RawPath = ""
		if u.EscapedPath() != rest {
			u.RawPath = rest
		}
		if rest != req.URL.EscapedPath() {
			// Audit events take their requestURI from URL.RequestURI(),
			// which prefers Opaque; the rest of the chain routes by Path.
			// So the audit log keeps the path as the client sent it,
			// /clusters/<path>/... included (req.RequestURI, for logs,
			// is untouched anyway).
			u.Opaque = req.URL.EscapedPath()
		}
		r := req.WithContext(logicalcluster.WithCluster(req.Context(), cluster))
		r.URL = &u
		next.ServeHTTP(w, r)
	})
}

// WriteStatus answers with a Status object, as the API server would.
func WriteStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeStatus(w, code, reason, msg)
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reason,
		Code:     int32(code),
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}

// ClusterClaim is the claim of kcp's service-account tokens that names the
// logical cluster they were issued in (satokens.ClusterClaim is this one).
const ClusterClaim = "kcp.io/cluster"

// TokenCluster is the logical cluster named by the kcp.io/cluster claim of
// a request's bearer token, for API paths (/api, /apis, /openapi) only.
// The token is not verified here: the cluster only decides where the
// request goes, and authentication then validates the token in that
// cluster, where only a token really issued there passes (a token names
// its service account's uid, which no other cluster has). A client could
// as well have named the cluster in the path.
func TokenCluster(req *http.Request) (logicalcluster.Name, bool) {
	p := req.URL.Path
	if p != "/api" && p != "/apis" && !strings.HasPrefix(p, "/api/") && !strings.HasPrefix(p, "/apis/") && !strings.HasPrefix(p, "/openapi/") {
		return "", false
	}
	auth := req.Header.Get("Authorization")
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "bearer ") || len(auth) > 16<<10 {
		return "", false
	}
	parts := strings.Split(strings.TrimSpace(auth[7:]), ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", false
	}
	var claims map[string]json.RawMessage
	if json.Unmarshal(payload, &claims) != nil {
		return "", false
	}
	var name string
	if json.Unmarshal(claims[ClusterClaim], &name) != nil || name == "" {
		return "", false
	}
	cl, err := logicalcluster.Parse(name)
	if err != nil || cl.IsWildcard() {
		return "", false
	}
	return cl, true
}

// afterCluster is what follows /clusters/<segment> in path.
func afterCluster(path string) string {
	rest, ok := strings.CutPrefix(path, prefix+"/")
	if !ok {
		return path
	}
	_, tail, _ := strings.Cut(rest, "/")
	return "/" + tail
}

// StockInformerMessage answers a stock client-go informer or reflector on
// /clusters/*.
const StockInformerMessage = "this looks like a stock client-go informer or reflector reading across all logical clusters (/clusters/*): " +
	"its cache is keyed by namespace and name, so objects of different workspaces with equal names would overwrite each other and most would be lost without an error. " +
	"Use the informer of github.com/kcpsql/kcp/client/clusterinformer (or clusterreconcile for controller-runtime), which keys by cluster too (docs/controllers.md); " +
	"a plain list (kubectl get) works as it is"

// StockInformerRequest reports whether a request across all clusters has
// the shape of client-go's stock reflector, whose store is keyed by
// namespace and name: the initial state streamed as watch events
// (WatchList, sendInitialEvents=true), or the first list of a reflector
// (resourceVersion=0 with a page size; the apiserver then answers the
// whole list from its cache). kcp's informers across clusters list
// without a page size and never stream the initial state; kubectl lists
// without resourceVersion=0.
func StockInformerRequest(q url.Values) bool {
	if q.Get("sendInitialEvents") == "true" {
		return true
	}
	limit := q.Get("limit")
	return q.Get("resourceVersion") == "0" && limit != "" && limit != "0" && q.Get("watch") != "true" && q.Get("watch") != "1"
}
