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
//   - discovery shows the export's resources and the claimed ones, and
//     OpenAPI v3 their schemas per consumer (exportview_meta.go).
//
// Everything else is refused; a consumer that did not bind the export
// answers 404 as if it did not exist. An accepted request continues down
// the handler chain as system:kcp:apiexport:<provider>:<export>.
package exportview

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
	kjson "sigs.k8s.io/json"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/server/routing"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Prefix starts every view path.
const Prefix = "/services/apiexport/"

// identity is the user a view request continues as: an ordinary user,
// allowed by the authorizer exactly what the view checked (a Grant), so
// that what the request reaches, and any check made on its behalf in
// another workspace, is the provider's and never the server's.
func identity(provider logicalcluster.Name, export string) user.Info {
	return viewidentity.Unprivileged(IdentityName(provider, export))
}

// IdentityName is the user name a view request continues as.
func IdentityName(provider logicalcluster.Name, export string) string {
	return "system:kcp:apiexport:" + string(provider) + ":" + export
}

// Served is what the view asks of the CRD serving layer: which groups the
// built-in APIs and kcp's own serve (never reached through a view), and
// under which export identity a consumer's resource is served.
type Served interface {
	Reserved(group string) bool
	BoundIdentity(cluster logicalcluster.Name, gr schema.GroupResource) string
}

// Filter is the view's handler.
type Filter struct {
	gate   *viewidentity.Gate
	index  *boundapis.Index
	served Served
	next   http.Handler
}

// New returns next, with view requests handled first.
func New(next http.Handler, authn authenticator.Request, authz authorizer.Authorizer, index *boundapis.Index, served Served) http.Handler {
	return &Filter{index: index, served: served, next: next, gate: &viewidentity.Gate{
		Prefix:   Prefix,
		PathHelp: "an APIExport view path is " + Prefix + "<provider workspace>/<export>/clusters/<cluster or *>/<API path>",
		Authn:    authn, Authz: authz,
		Resource: apis.ExportsResource, Verb: apis.VerbContent,
		AuthzContext: clusterauthz.WithExportGrant,
		Denied: func(caller string, provider logicalcluster.Name, name string) error {
			return fmt.Errorf("%q may not use the view of APIExport %s in %s (needs the verb %q on apiexports/%s there)", caller, name, provider, apis.VerbContent, name)
		},
		Impersonation: "the view of an APIExport does not take impersonation; authenticate as the user itself",
		Remote: func(ctx context.Context, u user.Info, provider logicalcluster.Name, name string) (bool, bool, error) {
			if f := remoteContent.Load(); f != nil {
				return (*f)(ctx, u, provider, name)
			}
			return false, false, nil
		},
	}}
}

// RemoteFunc decides the verb "content" on an APIExport of a workspace on
// another shard, by that shard's RBAC (handled false: it is on this one).
type RemoteFunc func(ctx context.Context, u user.Info, provider logicalcluster.Name, export string) (handled, allowed bool, err error)

var remoteContent atomic.Pointer[RemoteFunc]

// SetRemote gives the views the check of exports on other shards: a
// shard serves the view of such an export for the consumers it holds.
func SetRemote(f RemoteFunc) { remoteContent.Store(&f) }

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
	part := req.Header.Get(shards.ViewPartHeader) == "true"
	req.Header.Del(shards.ViewPartHeader)
	if serr := acrossShards(f.index, export, provider, name, cluster, part); serr != nil {
		viewidentity.Refuse(w, serr, "")
		return
	}
	ctx := viewidentity.WithTenant(req.Context(), provider, string(provider))
	as := identity(provider, name)
	grant := viewidentity.Grant{User: as.GetName(), Cluster: cluster}
	if !info.IsResourceRequest {
		// Discovery and OpenAPI of what the view serves
		// (exportview_meta.go).
		switch {
		case req.Method == http.MethodGet && isOpenAPI(apiPath):
			f.serveOpenAPI(w, req, ctx, export, as, grant, provider, cluster, apiPath)
		case req.Method == http.MethodGet && (apiPath == "/api" || apiPath == "/apis" || strings.HasPrefix(apiPath, "/api/") || strings.HasPrefix(apiPath, "/apis/")):
			f.serveDiscovery(w, req, ctx, export, as, grant, apiPath)
		default:
			viewidentity.Refuse(w, apierrors.NewForbidden(exportsGR, name, fmt.Errorf("the view of an APIExport serves discovery, OpenAPI v3 and the export's resources, not %s", apiPath)), "")
		}
		return
	}
	claim, serr := f.allow(export, cluster, info)
	if serr != nil {
		viewidentity.Refuse(w, serr, "")
		return
	}
	grant.Group, grant.Resource = info.APIGroup, info.Resource
	switch {
	case claim == nil:
		// The export's own resource: every verb, status and scale
		// included (across consumers, list and watch: allow).
		grant.Subresource = viewidentity.AnySubresource
	default:
		grant.Subresource, grant.Verbs = info.Subresource, slices.Clone(claim.Verbs)
		if slices.Contains(claim.Verbs, "delete") {
			grant.Verbs = append(grant.Verbs, "deletecollection")
		}
	}
	q := req.URL.Query()
	if cluster.IsWildcard() {
		ctx = crdserving.WithExport(ctx, export.Identity)
	} else if claim != nil && claim.LabelSelector != nil {
		var serr *apierrors.StatusError
		if req, q, serr = f.limitToSelector(ctx, req, as, grant, cluster, apiPath, info, claim); serr != nil {
			viewidentity.Refuse(w, serr, "")
			return
		}
		if info.Verb == "patch" {
			// Sent on as the update it amounts to.
			grant.Verbs = append(grant.Verbs, "update")
		}
	}
	f.next.ServeHTTP(w, viewidentity.Continue(viewidentity.WithGrant(ctx, grant), req, as, path, q))
}

// maxBody is the largest object a label-limited claim checks before a
// create or update (the server's own limit is 3 MiB).
const maxBody = 3 << 20

// limitToSelector applies a claim limited to labels: a list, watch or
// collection delete gets the claim's selector added to its own; a request
// for one object goes on only if the stored object has the labels (else
// 404, as if it did not exist); a create or update only if the object sent
// has them too; a patch is applied here to the stored object, checked,
// and sent on as an update of exactly that result at the stored
// resourceVersion (so a patch cannot take the labels off, and what the
// server applies is what was checked). It returns the request and query
// to continue with.
func (f *Filter) limitToSelector(ctx context.Context, req *http.Request, as user.Info, grant viewidentity.Grant, cluster logicalcluster.Name, apiPath string, info *apirequest.RequestInfo, claim *apis.PermissionClaim) (*http.Request, url.Values, *apierrors.StatusError) {
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	sel, err := boundapis.ClaimSelector(claim.LabelSelector)
	if err != nil {
		return nil, nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the claim's label selector is invalid: %v", err))
	}
	q := req.URL.Query()
	var body []byte
	switch info.Verb {
	case "list", "watch", "deletecollection":
		own := q.Get("labelSelector")
		if own == "" {
			q.Set("labelSelector", sel.String())
		} else {
			q.Set("labelSelector", sel.String()+","+own)
		}
		return req, q, nil
	case "create", "update", "patch":
		if body, err = io.ReadAll(io.LimitReader(req.Body, maxBody+1)); err != nil || len(body) > maxBody {
			return nil, nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("at most %d bytes", maxBody))
		}
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if info.Verb == "patch" {
			break
		}
		ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
		if ct != "application/json" {
			return nil, nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", gr, info.Name,
				fmt.Sprintf("through a claim limited to labels, objects are sent as application/json, not %q", ct), 0, false)
		}
		if !sel.Matches(labelsOf(body)) {
			return nil, nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the consumer granted %s only with the labels %s; the object sent does not have them", gr, sel))
		}
		if info.Verb == "create" {
			return req, q, nil
		}
	case "get", "delete":
	default:
		return nil, nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("%s is not possible through a claim limited to labels", info.Verb))
	}
	// The stored object, read as the view (allowed a get of it for this).
	objectPath := strings.TrimSuffix(apiPath, "/"+info.Subresource)
	probe := req.Clone(ctx)
	probe.Method, probe.Body, probe.ContentLength = http.MethodGet, http.NoBody, 0
	probe.Header.Del("Content-Type")
	probe.Header.Set("Accept", "application/json")
	read := grant
	read.Subresource, read.Verbs = "", []string{"get"}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, viewidentity.Continue(viewidentity.WithGrant(ctx, read), probe, as, "/clusters/"+string(cluster)+objectPath, url.Values{}))
	if rec.Code == http.StatusNotFound {
		return nil, nil, apierrors.NewNotFound(gr, info.Name)
	}
	if rec.Code != http.StatusOK {
		return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading %s %s to check the claim's labels: HTTP %d", gr, info.Name, rec.Code))
	}
	stored := rec.Body.Bytes()
	if !sel.Matches(labelsOf(stored)) {
		// Outside the claim: as if it did not exist.
		return nil, nil, apierrors.NewNotFound(gr, info.Name)
	}
	if info.Verb != "patch" {
		return req, q, nil
	}
	patched, serr := applyPatch(gr, info.Name, req.Header.Get("Content-Type"), stored, body)
	if serr != nil {
		return nil, nil, serr
	}
	if !sel.Matches(labelsOf(patched)) {
		return nil, nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the consumer granted %s only with the labels %s; after this patch the object would not have them", gr, sel))
	}
	// Sent on as the update it amounts to, at the stored
	// resourceVersion: a change in between fails with a conflict.
	out := req.Clone(ctx)
	out.Method = http.MethodPut
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(patched)), int64(len(patched))
	out.Header.Set("Content-Type", "application/json")
	return out, q, nil
}

// labelsOf reads an object's labels from its JSON (none if it is not an
// object).
func labelsOf(body []byte) labels.Set {
	var obj struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	// Case-sensitive, as the API server decodes: encoding/json would
	// also take "METADATA", which the server ignores.
	if kjson.UnmarshalCaseSensitivePreserveInts(body, &obj) != nil {
		return nil
	}
	return obj.Metadata.Labels
}

// allow decides a resource request; for a claimed resource it returns the
// claim.
func (f *Filter) allow(export *boundapis.Export, cluster logicalcluster.Name, info *apirequest.RequestInfo) (*apis.PermissionClaim, *apierrors.StatusError) {
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	exported := slices.ContainsFunc(export.Resources, func(r apis.BoundResource) bool { return r.Group == gr.Group && r.Resource == gr.Resource })
	if exported && (info.APIPrefix != "apis" || apis.ReservedGroup(gr.Group) || f.served.Reserved(gr.Group)) {
		// A schema in a group the server serves itself (stored before
		// such schemas were refused): the request would reach the
		// built-in resource, not the export's.
		return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("APIExport %s lists %s, a resource of a group kcp or Kubernetes serves itself; the view serves only an export's own resources", export.Name, gr))
	}
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
		if f.served.BoundIdentity(cluster, gr) != export.Identity {
			// The consumer serves this resource from something else (a
			// CRD of its own): not the export's objects.
			return nil, apierrors.NewNotFound(gr, info.Name)
		}
		return nil, nil
	}
	// A claim covers the resource's objects; a subresource
	// (serviceaccounts/token, pods/exec, .../status) only when claimed by
	// name ("serviceaccounts/token").
	claimed := gr
	if info.Subresource != "" {
		claimed.Resource += "/" + info.Subresource
	}
	for _, c := range binding.Claims {
		if c.GroupResource() == claimed {
			if slices.Contains(c.Verbs, info.Verb) || (info.Verb == "deletecollection" && slices.Contains(c.Verbs, "delete")) {
				return &c, nil
			}
			return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the consumer granted %v on %s, not %s", c.Verbs, claimedName(claimed), info.Verb))
		}
	}
	return nil, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("APIExport %s serves %s; %s is neither one of them nor a permission claim workspace %s accepted", export.Name, resourceList(export), claimedName(claimed), cluster))
}

// claimedName is a claimed resource as a claim names it: resource.group,
// or resource/subresource.group.
func claimedName(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
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

// applyPatch applies a patch request's body to the stored object as the
// API server would, for the dialects whose result can be computed here.
func applyPatch(gr schema.GroupResource, name, contentType string, stored, patch []byte) ([]byte, *apierrors.StatusError) {
	ct, _, _ := mime.ParseMediaType(contentType)
	var out []byte
	var err error
	switch ct {
	case string(types.MergePatchType):
		out, err = jsonpatch.MergePatch(stored, patch)
	case string(types.JSONPatchType):
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(patch); err == nil {
			out, err = p.Apply(stored)
		}
	case string(types.StrategicMergePatchType):
		var meta metav1.TypeMeta
		if err = kjson.UnmarshalCaseSensitivePreserveInts(stored, &meta); err != nil {
			break
		}
		typed, terr := scheme.Scheme.New(meta.GroupVersionKind())
		if terr != nil {
			return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", gr, name,
				fmt.Sprintf("%s has no strategic merge patch; use a JSON merge patch or a JSON patch", gr), 0, false)
		}
		out, err = strategicpatch.StrategicMergePatch(stored, patch, typed)
	default:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", gr, name,
			fmt.Sprintf("through a claim limited to labels, a patch is a JSON merge patch, a JSON patch or a strategic merge patch, not %q (server-side apply cannot be checked before it is applied)", ct), 0, false)
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the patch does not apply: %v", err))
	}
	return out, nil
}

// acrossShards refuses what this shard cannot answer whole: the view
// serves the consumers this shard holds. Across all consumers, that is
// the whole answer only when no consumer is on another shard, or when the
// front proxy asks for this shard's part (shards.ViewPartHeader) and
// merges it with the others'. A consumer on another shard is served by
// that shard. Refused (501), never answered in part.
func acrossShards(index *boundapis.Index, export *boundapis.Export, provider logicalcluster.Name, name string, cluster logicalcluster.Name, part bool) *apierrors.StatusError {
	if cluster.IsWildcard() && part {
		return nil
	}
	remote := index.RemoteConsumers(provider, name)
	var where []string
	for _, shard := range slices.Sorted(maps.Keys(remote)) {
		cs := remote[shard]
		if !cluster.IsWildcard() && !slices.Contains(cs, cluster) {
			continue
		}
		where = append(where, fmt.Sprintf("%v on shard %s", cs[:min(len(cs), 5)], shard))
	}
	if len(where) == 0 && (export.Shard == "" || !cluster.IsWildcard()) {
		return nil
	}
	if len(where) == 0 {
		where = append(where, "those on shard "+export.Shard)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotImplemented, Reason: "NotImplemented",
		Message: fmt.Sprintf("this shard serves the view of APIExport %s in %s for the consumers it holds only, and others bind it: %s; use the view through the front proxy, which serves every shard's consumers (docs/operations.md, \"Shards\")",
			name, provider, strings.Join(where, "; "))}}
}
