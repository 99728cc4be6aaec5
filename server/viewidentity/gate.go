package viewidentity

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Gate is the front every view shares. A view is served at
//
//	<Prefix><workspace>/<name>/clusters/<cluster or *>/<API path>
//
// and opened by one verb on the object <name> of Resource in <workspace>,
// checked with the caller's identity there.
type Gate struct {
	Prefix string
	// PathHelp ends the 404 for a path that is not a view path.
	PathHelp string
	Authn    authenticator.Request
	Authz    authorizer.Authorizer
	Resource schema.GroupVersionResource
	Verb     string
	// AuthzContext, if set, marks the context the verb is checked in.
	AuthzContext func(context.Context) context.Context
	// Denied words the 403 for a caller without the verb.
	Denied func(caller string, workspace logicalcluster.Name, name string) error
	// Impersonation, if set, refuses requests with Impersonate-* headers
	// with this reason (else Continue drops the headers).
	Impersonation string
	// Remote, if set, decides the verb for a view whose workspace is on
	// another shard (handled false: it is on this one); an error says it
	// could not be decided now (503).
	Remote func(ctx context.Context, u user.Info, workspace logicalcluster.Name, name string) (handled, allowed bool, err error)
}

// Opened is a request the gate let through.
type Opened struct {
	Workspace logicalcluster.Name
	Name      string
	// Rest is what follows <name>/: clusters/<cluster or *>/<API path>.
	Rest string
}

// Open parses a view request and checks its caller; it answers the
// request itself and returns false when the request may not go on.
func (g *Gate) Open(w http.ResponseWriter, req *http.Request) (*Opened, bool) {
	rest := strings.TrimPrefix(req.URL.Path, g.Prefix)
	wsPart, rest, _ := strings.Cut(rest, "/")
	name, rest, _ := strings.Cut(rest, "/")
	workspace, err := logicalcluster.Parse(wsPart)
	if err != nil || workspace.IsWildcard() || name == "" || !strings.HasPrefix(rest, "clusters/") {
		Refuse(w, apierrors.NewNotFound(schema.GroupResource{}, req.URL.Path), g.PathHelp)
		return nil, false
	}
	if g.Impersonation != "" {
		for h := range req.Header {
			if strings.HasPrefix(http.CanonicalHeaderKey(h), "Impersonate-") {
				Refuse(w, apierrors.NewForbidden(g.Resource.GroupResource(), name, fmt.Errorf("%s", g.Impersonation)), "")
				return nil, false
			}
		}
	}
	// Who is asking, in the view's workspace.
	authReq := req.WithContext(logicalcluster.WithCluster(req.Context(), workspace))
	resp, ok, err := g.Authn.AuthenticateRequest(authReq)
	if err != nil || !ok || resp == nil || resp.User == nil {
		Refuse(w, apierrors.NewUnauthorized("Unauthorized"), "")
		return nil, false
	}
	ctx := authReq.Context()
	if g.AuthzContext != nil {
		ctx = g.AuthzContext(ctx)
	}
	allowed, handled := false, false
	if g.Remote != nil {
		var err error
		handled, allowed, err = g.Remote(ctx, resp.User, workspace, name)
		if handled && err != nil {
			Refuse(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the %s verb on %s %s of %s cannot be checked now: %v", g.Verb, g.Resource.Resource, name, workspace, err)), "")
			return nil, false
		}
	}
	if !handled {
		d, _, err := g.Authz.Authorize(ctx, authorizer.AttributesRecord{
			User: resp.User, Verb: g.Verb, APIGroup: g.Resource.Group, APIVersion: g.Resource.Version,
			Resource: g.Resource.Resource, Name: name, ResourceRequest: true,
		})
		allowed = err == nil && d == authorizer.DecisionAllow
	}
	if !allowed {
		Refuse(w, apierrors.NewForbidden(g.Resource.GroupResource(), name, g.Denied(resp.User.GetName(), workspace, name)), "")
		return nil, false
	}
	return &Opened{Workspace: workspace, Name: name, Rest: rest}, true
}

var infos = &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// RequestInfo reads what a view request asks for at apiPath (the path
// within its cluster): the kind of request, verb and resource.
func RequestInfo(req *http.Request, apiPath string) (*apirequest.RequestInfo, error) {
	probe := req.Clone(req.Context())
	probe.URL.Path = apiPath
	return infos.NewRequestInfo(probe)
}

// Privileged is a view's identity: it reads across clusters, so it is in
// system:masters; only a view that checked the request can grant it.
func Privileged(name string) user.Info {
	return &user.DefaultInfo{Name: name, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
}
