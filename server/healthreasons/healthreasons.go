// Package healthreasons shows why a health check fails, in
// /readyz?verbose (and /livez, /healthz), to those who may read that
// check's own endpoint. Upstream's verbose output withholds every reason
// from everyone ("[-]datastore-writes failed: reason withheld"), because
// the endpoint is public (root's system:public-info-viewer grants it to
// every user, tenants included), and leaves the reason to each check's
// own path (/readyz/datastore-writes), which is not public. So here a
// withheld reason is filled in for a user whom the server's authorizer
// (server-wide URLs: root's RBAC, system:masters) allows to get
// /readyz/<check>, from that endpoint; everyone else still reads "reason
// withheld". The reasons (driver errors, free disk space, paths) are the
// operator's business, not the tenants'.
package healthreasons

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// paths are the upstream health endpoints whose checks have endpoints of
// their own below them.
var paths = map[string]bool{"/readyz": true, "/livez": true, "/healthz": true}

const withheld = " failed: reason withheld"

// Authorizer is what WithReasons asks (the server's authorizer).
type Authorizer interface {
	Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error)
}

// WithReasons wraps the server's inner handler (after authentication and
// authorization, before the endpoints) so that a verbose health answer
// carries the reasons its reader may see.
func WithReasons(h http.Handler, a Authorizer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !paths[r.URL.Path] || !r.URL.Query().Has("verbose") {
			h.ServeHTTP(w, r)
			return
		}
		u, ok := request.UserFrom(r.Context())
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		answer := newRecorder()
		h.ServeHTTP(answer, r)
		body := answer.body.String()
		if strings.Contains(body, withheld) {
			lines := strings.Split(body, "\n")
			for i, line := range lines {
				name, failed := strings.CutSuffix(line, withheld)
				name, checkLine := strings.CutPrefix(name, "[-]")
				if !failed || !checkLine || name == "" || strings.ContainsAny(name, "/?# ") {
					continue
				}
				path := r.URL.Path + "/" + name
				d, _, err := a.Authorize(r.Context(), authorizer.AttributesRecord{User: u, Verb: "get", Path: path})
				if err != nil || d != authorizer.DecisionAllow {
					continue
				}
				if reason, ok := reasonOf(h, r, path); ok {
					lines[i] = "[-]" + name + " failed: " + reason
				}
			}
			body = strings.Join(lines, "\n")
		}
		for k, v := range answer.header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(answer.code)
		w.Write([]byte(body))
	})
}

// reasonOf asks the check's own endpoint (upstream answers "internal server
// error: <reason>") why it fails; false if it passes by now.
func reasonOf(h http.Handler, r *http.Request, path string) (string, bool) {
	sub := r.Clone(r.Context())
	sub.URL.Path, sub.URL.RawPath, sub.URL.RawQuery = path, "", ""
	sub.RequestURI = path
	answer := newRecorder()
	h.ServeHTTP(answer, sub)
	if answer.code == http.StatusOK {
		return "", false
	}
	reason := strings.TrimSpace(answer.body.String())
	reason = strings.TrimPrefix(reason, "internal server error: ")
	// One line per check, as upstream's list has.
	return strings.Join(strings.Fields(reason), " "), reason != ""
}

// recorder keeps an answer to rewrite it; health answers are small.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}, code: http.StatusOK} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

func (r *recorder) WriteHeader(code int) { r.code = code }
