// Package viewidentity lets a view (a filter in front of the handler chain
// that checked a request itself, like the syncer view or an APIExport's
// view) continue the request as an identity of its own. The identity is a
// context value: nothing a client sends can set it, and the client's own
// credentials and impersonation headers are dropped.
package viewidentity

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"
)

type key struct{}

// WithViewIdentity wraps the server's authenticator: a request a view
// continued authenticates as the view's identity.
func WithViewIdentity(delegate authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if u, ok := req.Context().Value(key{}).(user.Info); ok {
			return &authenticator.Response{User: u}, true, nil
		}
		return delegate.AuthenticateRequest(req)
	})
}

// Continue returns req as the identity u, at path with query q, without
// the client's credentials.
func Continue(ctx context.Context, req *http.Request, u user.Info, path string, q url.Values) *http.Request {
	out := req.Clone(context.WithValue(ctx, key{}, u))
	for h := range out.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(h), "Impersonate-") {
			out.Header.Del(h)
		}
	}
	out.Header.Del("Authorization")
	nu := *req.URL
	nu.Path, nu.RawPath = path, ""
	if nu.EscapedPath() != path {
		nu.RawPath = path
	}
	nu.RawQuery = q.Encode()
	out.URL = &nu
	out.RequestURI = nu.RequestURI()
	return out
}

// Refuse answers a view request with err as a Status, detail appended to
// its message.
func Refuse(w http.ResponseWriter, err apierrors.APIStatus, detail string) {
	s := err.Status()
	s.Kind, s.APIVersion = "Status", "v1"
	if detail != "" {
		s.Message += ": " + detail
	}
	if s.Code >= 500 {
		klog.V(2).InfoS("view request failed", "err", s.Message)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(s)
}
