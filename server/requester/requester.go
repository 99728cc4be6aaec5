// Package requester remembers who a request authenticated as, before
// impersonation replaced the user.
//
// Impersonation is authorized in the request's own logical cluster: a
// workspace admin may impersonate anyone there, and the impersonated
// identity means something only there. When kcp checks a permission of
// the request in another workspace (bind on an APIExport in the
// provider's workspace, use on SyncTargets in a location workspace), the
// identity checked must be the one the request proved, not one a tenant
// chose: Real answers it.
package requester

import (
	"context"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

type key struct{}

type holder struct{ u user.Info }

// WithHolder makes room, in each request's context, for the user its
// authentication finds. It goes in front of the handler chain's
// authentication (and so of impersonation).
func WithHolder(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), key{}, &holder{})))
	})
}

// Remember wraps the server's authenticator: the user it authenticates a
// request as is kept in the request's holder.
func Remember(delegate authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := delegate.AuthenticateRequest(req)
		if h, found := req.Context().Value(key{}).(*holder); found && ok && err == nil && resp != nil && h.u == nil {
			h.u = resp.User
		}
		return resp, ok, err
	})
}

// Authenticated is the user the request authenticated as, if known.
func Authenticated(ctx context.Context) (user.Info, bool) {
	h, ok := ctx.Value(key{}).(*holder)
	if !ok || h.u == nil {
		return nil, false
	}
	return h.u, true
}

// Both are the identities to check outside the request's own cluster: u
// (the request acts as it) and, when the request impersonates u, the
// identity it proved too. Each must hold the permission: impersonation
// gives no more than the impersonated identity has, and counts only in
// the cluster that allowed it.
func Both(ctx context.Context, u user.Info) []user.Info {
	r, ok := Authenticated(ctx)
	if !ok || u == nil || r.GetName() == u.GetName() {
		return []user.Info{u}
	}
	return []user.Info{u, r}
}
