package exportview

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// What a client learns about the view before it makes requests: discovery
// and OpenAPI. Both describe what the view serves and nothing else, so
// that kubectl (api-resources, apply, explain) and client libraries work
// through it as against a cluster:
//
//   - discovery (/api, /apis, /api/v1, /apis/<group>/<version>) lists the
//     export's resources and the resources it claims, and no other group or
//     resource; it is answered in the legacy (not aggregated) form, which
//     every client reads;
//   - OpenAPI v3 is served per consumer (clusters/<consumer>/openapi/v3):
//     the index lists the group versions of the export's and the claimed
//     resources, with URLs through the view, and each document is the
//     consumer's own (the export's schemas as bound there). Across all
//     consumers (clusters/*) there is no one schema to serve.

// served are the resources the view serves of an export: by group, the
// resource names (the export's own and the claimed ones).
func served(export *boundapis.Export) map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	add := func(group, resource string) {
		if out[group] == nil {
			out[group] = sets.New[string]()
		}
		base, _, _ := strings.Cut(resource, "/")
		out[group].Insert(base)
	}
	for _, r := range export.Resources {
		add(r.Group, r.Resource)
	}
	for _, c := range export.Claims {
		add(c.Group, c.Resource)
	}
	return out
}

// isOpenAPI reports whether a path is the OpenAPI's.
func isOpenAPI(apiPath string) bool {
	return apiPath == "/openapi/v2" || apiPath == "/openapi/v3" || strings.HasPrefix(apiPath, "/openapi/v3/")
}

// serveDiscovery answers a discovery request, from the server's discovery
// across the export's consumers, with only what the view serves.
func (f *Filter) serveDiscovery(w http.ResponseWriter, req *http.Request, ctx context.Context, export *boundapis.Export, as user.Info, grant viewidentity.Grant, apiPath string) {
	ctx = crdserving.WithExport(ctx, export.Identity)
	grant.Cluster, grant.Discovery = logicalcluster.Wildcard, true
	inner := viewidentity.Continue(viewidentity.WithGrant(ctx, grant), req, as, "/clusters/*"+apiPath, req.URL.Query())
	inner.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, inner)
	if rec.Code != http.StatusOK {
		copyResponse(w, rec)
		return
	}
	want := served(export)
	var out interface{}
	switch parts := strings.Split(strings.Trim(apiPath, "/"), "/"); {
	case apiPath == "/api":
		out = json.RawMessage(rec.Body.Bytes())
	case apiPath == "/apis":
		var l metav1.APIGroupList
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			viewidentity.Refuse(w, apierrors.NewInternalError(err), "")
			return
		}
		kept := l.Groups[:0]
		for _, g := range l.Groups {
			if want[g.Name] != nil {
				kept = append(kept, g)
			}
		}
		l.Groups = kept
		out = &l
	case len(parts) == 2 && parts[0] == "api", len(parts) == 3 && parts[0] == "apis":
		group := ""
		if parts[0] == "apis" {
			group = parts[1]
		}
		if want[group] == nil {
			viewidentity.Refuse(w, notFound(apiPath+": the view of APIExport "+export.Name+" serves no resource of this group"), "")
			return
		}
		var l metav1.APIResourceList
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			viewidentity.Refuse(w, apierrors.NewInternalError(err), "")
			return
		}
		kept := l.APIResources[:0]
		for _, r := range l.APIResources {
			base, _, _ := strings.Cut(r.Name, "/")
			if want[group].Has(base) {
				kept = append(kept, r)
			}
		}
		l.APIResources = kept
		out = &l
	default:
		// /apis/<group>: the group's versions, as they are.
		if len(parts) == 2 && want[parts[1]] == nil {
			viewidentity.Refuse(w, notFound(apiPath+": the view of APIExport "+export.Name+" serves no resource of this group"), "")
			return
		}
		out = json.RawMessage(rec.Body.Bytes())
	}
	writeJSON(w, out)
}

// serveOpenAPI answers the OpenAPI paths of one consumer through the view.
func (f *Filter) serveOpenAPI(w http.ResponseWriter, req *http.Request, ctx context.Context, export *boundapis.Export, as user.Info, grant viewidentity.Grant,
	provider logicalcluster.Name, cluster logicalcluster.Name, apiPath string) {
	if cluster.IsWildcard() {
		viewidentity.Refuse(w, notFound(apiPath+": across all consumers (clusters/*) there is no one schema; the view serves OpenAPI per consumer, at clusters/<consumer>"+apiPath), "")
		return
	}
	if _, ok := f.index.BindingTo(cluster, export.Identity); !ok {
		viewidentity.Refuse(w, notFound(apiPath), "")
		return
	}
	if apiPath == "/openapi/v2" {
		viewidentity.Refuse(w, notFound(apiPath+": the view serves OpenAPI v3 (/openapi/v3)"), "")
		return
	}
	want := served(export)
	allowed := func(gvPath string) bool {
		parts := strings.Split(gvPath, "/")
		switch {
		case len(parts) == 2 && parts[0] == "api":
			return want[""] != nil
		case len(parts) == 3 && parts[0] == "apis":
			return want[parts[1]] != nil
		}
		return false
	}
	gvPath := strings.TrimPrefix(strings.TrimPrefix(apiPath, "/openapi/v3"), "/")
	if gvPath != "" && !allowed(gvPath) {
		viewidentity.Refuse(w, notFound(apiPath+": the view of APIExport "+export.Name+" serves no resource of this group"), "")
		return
	}
	grant.Cluster, grant.Discovery = cluster, true
	inner := viewidentity.Continue(viewidentity.WithGrant(ctx, grant), req, as, "/clusters/"+string(cluster)+apiPath, req.URL.Query())
	if gvPath != "" {
		f.next.ServeHTTP(w, inner)
		return
	}
	// The index: the view's group versions, at URLs through the view.
	inner.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, inner)
	if rec.Code != http.StatusOK {
		copyResponse(w, rec)
		return
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &index); err != nil {
		viewidentity.Refuse(w, apierrors.NewInternalError(err), "")
		return
	}
	base := Prefix + string(provider) + "/" + export.Name + "/clusters/" + string(cluster)
	out := map[string]map[string]map[string]string{"paths": {}}
	for p, v := range index.Paths {
		if !allowed(p) {
			continue
		}
		i := strings.Index(v.ServerRelativeURL, "/openapi/v3/")
		if i < 0 {
			continue
		}
		out["paths"][p] = map[string]string{"serverRelativeURL": base + v.ServerRelativeURL[i:]}
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		viewidentity.Refuse(w, apierrors.NewInternalError(err), "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// notFound is a 404 Status with a message.
func notFound(msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: msg}}
}
