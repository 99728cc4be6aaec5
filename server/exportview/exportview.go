// Package exportview serves a provider the objects of its APIExport in
// every workspace that bound it, with one list and one watch per resource,
// and the resources consumers granted it through permission claims.
//
//	/services/apiexport/<provider workspace>/<export>/clusters/<cluster or *>/<API path>
//
// The caller authenticates as usual, in the provider workspace, and needs
// the verb "content" on apiexports/<export> there. Then:
//
//   - the export's resources across all consumers (*): list and watch.
//     Objects are stored under the export's identity, so the key range
//     holds exactly the bound objects of this export, nothing of another
//     export of the same group and resource and nothing of a workspace
//     that did not bind it; each carries its kcp.io/cluster annotation;
//   - the export's resources in one consumer that bound it: every verb
//     (status writes included);
//   - a claimed resource in one consumer whose binding accepted the claim:
//     the claimed verbs;
//   - discovery shows the export's resources.
//
// Everything else is refused; a consumer that did not bind the export
// answers 404 as if it did not exist. An accepted request continues down
// the handler chain as system:kcp:apiexport:<provider>:<export>.
package exportview

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/server/routing"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Prefix starts every view path.
const Prefix = "/services/apiexport/"

// identity is the user a view request continues as.
func identity(provider logicalcluster.Name, export string) user.Info {
	return viewidentity.Privileged("system:kcp:apiexport:" + string(provider) + ":" + export)
}

// Filter is the view's handler.
type Filter struct {
	gate  *viewidentity.Gate
	index *boundapis.Index
	next  http.Handler
}

// New returns next, with view requests handled first.
func New(next http.Handler, authn authenticator.Request, authz authorizer.Authorizer, index *boundapis.Index) http.Handler {
	return &Filter{index: index, next: next, gate: &viewidentity.Gate{
		Prefix:   Prefix,
		PathHelp: "an APIExport view path is " + Prefix + "<provider workspace>/<export>/clusters/<cluster or *>/<API path>",
		Authn:    authn, Authz: authz,
		Resource: apis.ExportsResource, Verb: apis.VerbContent,
		AuthzContext: clusterauthz.WithExportGrant,
		Denied: func(caller string, provider logicalcluster.Name, name string) error {
			return fmt.Errorf("%q may not use the view of APIExport %s in %s (needs the verb %q on apiexports/%s there)", caller, name, provider, apis.VerbContent, name)
		},
		Impersonation: "the view of an APIExport does not take impersonation; authenticate as the user itself",
	}}
}

func (f *Filter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !strings.HasPrefix(req.URL.Path, Prefix) {
		f.next.ServeHTTP(w, req)
		return
	}
	opened, ok := f.gate.Open(w, req)
	if !ok {
		return
	}
	provider, name := opened.Workspace, opened.Name
	exportsGR := apis.ExportsResource.GroupResource()
	export, err := f.index.Export(provider, name)
	if export == nil {
		if err != nil {
			viewidentity.Refuse(w, apierrors.NewServiceUnavailable(err.Error()), "")
			return
		}
		viewidentity.Refuse(w, apierrors.NewNotFound(exportsGR, name), "")
		return
	}
	// What it asks for.
	path := "/" + opened.Rest
	cluster, apiPath, err := routing.Split(path)
	if err != nil {
		viewidentity.Refuse(w, apierrors.NewBadRequest(err.Error()), "")
		return
	}
	info, err := viewidentity.RequestInfo(req, apiPath)
	if err != nil {
		viewidentity.Refuse(w, apierrors.NewBadRequest(err.Error()), "")
		return
	}
	ctx := req.Context()
	if !info.IsResourceRequest {
		// Discovery of the export's resources, the same for every consumer.
		if req.Method != http.MethodGet || !(apiPath == "/api" || apiPath == "/apis" || strings.HasPrefix(apiPath, "/api/") || strings.HasPrefix(apiPath, "/apis/")) {
			viewidentity.Refuse(w, apierrors.NewForbidden(exportsGR, name, fmt.Errorf("the view of an APIExport serves discovery and the export's resources, not %s", apiPath)), "")
			return
		}
		ctx = crdserving.WithExport(ctx, export.Identity)
		path = "/clusters/*" + apiPath
	} else if claim, err := f.allow(export, cluster, info); err != nil {
		viewidentity.Refuse(w, err, "")
		return
	} else if cluster.IsWildcard() {
		ctx = crdserving.WithExport(ctx, export.Identity)
	} else if claim != nil && claim.LabelSelector != nil {
		q, err := f.limitToSelector(ctx, req, identity(provider, name), cluster, apiPath, info, claim)
		if err != nil {
			viewidentity.Refuse(w, err, "")
			return
		}
		f.next.ServeHTTP(w, viewidentity.Continue(ctx, req, identity(provider, name), path, q))
		return
	}
	f.next.ServeHTTP(w, viewidentity.Continue(ctx, req, identity(provider, name), path, req.URL.Query()))
}

// maxBody is the largest object a label-limited claim checks before a
// create or update (the server's own limit is 3 MiB).
const maxBody = 3 << 20

// limitToSelector applies a claim limited to labels: a list, watch or
// collection delete gets the claim's selector added to its own; a request
// for one object goes on only if the stored object has the labels (else
// 404, as if it did not exist); a create or update only if the object sent
// has them too. It returns the query to continue with.
func (f *Filter) limitToSelector(ctx context.Context, req *http.Request, as user.Info, cluster logicalcluster.Name, apiPath string, info *apirequest.RequestInfo, claim *apis.PermissionClaim) (url.Values, *apierrors.StatusError) {
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	sel, err := boundapis.ClaimSelector(claim.LabelSelector)
	if err != nil {
		return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the claim's label selector is invalid: %v", err))
	}
	q := req.URL.Query()
	switch info.Verb {
	case "list", "watch", "deletecollection":
		own := q.Get("labelSelector")
		if own == "" {
			q.Set("labelSelector", sel.String())
		} else {
			q.Set("labelSelector", sel.String()+","+own)
		}
		return q, nil
	case "create", "update":
		ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
		if ct != "application/json" {
			return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", gr, info.Name,
				fmt.Sprintf("through a claim limited to labels, objects are sent as application/json, not %q", ct), 0, false)
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("at most %d bytes", maxBody))
		}
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		var obj struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if !sel.Matches(labels.Set(obj.Metadata.Labels)) {
			return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the consumer granted %s only with the labels %s; the object sent does not have them", gr, sel))
		}
		if info.Verb == "create" {
			return q, nil
		}
	case "get", "patch", "delete":
	default:
		return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("%s is not possible through a claim limited to labels", info.Verb))
	}
	// The stored object, read as the view.
	objectPath := strings.TrimSuffix(apiPath, "/"+info.Subresource)
	probe := req.Clone(ctx)
	probe.Method, probe.Body, probe.ContentLength = http.MethodGet, http.NoBody, 0
	probe.Header.Del("Content-Type")
	probe.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, viewidentity.Continue(ctx, probe, as, "/clusters/"+string(cluster)+objectPath, url.Values{}))
	if rec.Code == http.StatusNotFound {
		return nil, apierrors.NewNotFound(gr, info.Name)
	}
	if rec.Code != http.StatusOK {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading %s %s to check the claim's labels: HTTP %d", gr, info.Name, rec.Code))
	}
	var stored struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &stored); err != nil {
		return nil, apierrors.NewServiceUnavailable(err.Error())
	}
	if !sel.Matches(labels.Set(stored.Metadata.Labels)) {
		// Outside the claim: as if it did not exist.
		return nil, apierrors.NewNotFound(gr, info.Name)
	}
	return q, nil
}

// allow decides a resource request; for a claimed resource it returns the
// claim.
func (f *Filter) allow(export *boundapis.Export, cluster logicalcluster.Name, info *apirequest.RequestInfo) (*apis.PermissionClaim, *apierrors.StatusError) {
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	exported := slices.ContainsFunc(export.Resources, func(r apis.BoundResource) bool { return r.Group == gr.Group && r.Resource == gr.Resource })
	if exported && cluster.IsWildcard() {
		if info.Verb != "list" && info.Verb != "watch" {
			return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("across all consumers (clusters/*) the view allows list and watch; %s an object at clusters/<its kcp.io/cluster>", info.Verb))
		}
		return nil, nil
	}
	if cluster.IsWildcard() {
		return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("APIExport %s serves %s; across all consumers only its own resources are served (claimed resources are reached per consumer, at clusters/<consumer>)", export.Name, resourceList(export)))
	}
	binding, ok := f.index.BindingTo(cluster, export.Identity)
	if !ok {
		// Whether the workspace exists is none of the provider's business.
		return nil, apierrors.NewNotFound(gr, info.Name)
	}
	if exported {
		return nil, nil
	}
	for _, c := range binding.Claims {
		if c.GroupResource() == gr {
			if slices.Contains(c.Verbs, info.Verb) || (info.Verb == "deletecollection" && slices.Contains(c.Verbs, "delete")) {
				return &c, nil
			}
			return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the consumer granted %v on %s, not %s", c.Verbs, gr, info.Verb))
		}
	}
	return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("APIExport %s serves %s; %s is neither one of them nor a permission claim workspace %s accepted", export.Name, resourceList(export), gr, cluster))
}

func resourceList(e *boundapis.Export) string {
	var names []string
	for _, r := range e.Resources {
		names = append(names, r.Resource+"."+r.Group)
	}
	if len(names) == 0 {
		return "no resources"
	}
	return strings.Join(names, ", ")
}
