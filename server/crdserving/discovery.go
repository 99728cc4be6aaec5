package crdserving

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/endpoints/discovery"
)

// group is what discovery shows of one API group of a cluster's CRDs.
type group struct {
	name     string
	versions []string // served, preferred first
	// resources per version, legacy and aggregated forms
	legacy     map[string][]metav1.APIResource
	aggregated map[string][]apidiscoveryv2.APIResourceDiscovery
}

// groups builds the discovery of a cluster's served CRDs, leaving out
// reserved groups. Groups are sorted by name.
func (s *Server) groups(sc scope) []*group {
	byName := map[string]*group{}
	for _, crd := range s.visible(sc) {
		if !served(crd) || s.reserved(crd.Spec.Group) {
			continue
		}
		g := byName[crd.Spec.Group]
		if g == nil {
			g = &group{name: crd.Spec.Group, legacy: map[string][]metav1.APIResource{}, aggregated: map[string][]apidiscoveryv2.APIResourceDiscovery{}}
			byName[g.name] = g
		}
		addCRD(g, crd)
	}
	out := make([]*group, 0, len(byName))
	for _, g := range byName {
		sort.Slice(g.versions, func(i, j int) bool {
			return version.CompareKubeAwareVersionStrings(g.versions[i], g.versions[j]) > 0
		})
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func addCRD(g *group, crd *apiextensionsv1.CustomResourceDefinition) {
	names := crd.Status.AcceptedNames
	namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped
	verbs := metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	if apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating) {
		verbs = metav1.Verbs{"delete", "deletecollection", "get", "list", "watch"}
	}
	var hash string
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			hash = discovery.StorageVersionHash(crd.Spec.Group, v.Name, names.Kind)
		}
	}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		if _, ok := g.legacy[v.Name]; !ok {
			g.versions = append(g.versions, v.Name)
			g.legacy[v.Name] = nil
		}
		sub, _ := apiextensionshelpers.GetSubresourcesForVersion(crd, v.Name)
		kind := &metav1.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: names.Kind}
		scope := apidiscoveryv2.ScopeCluster
		if namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		res := apidiscoveryv2.APIResourceDiscovery{
			Resource: names.Plural, SingularResource: names.Singular, Scope: scope, ResponseKind: kind,
			Verbs: verbs, ShortNames: names.ShortNames, Categories: names.Categories,
		}
		legacy := []metav1.APIResource{{
			Name: names.Plural, SingularName: names.Singular, Namespaced: namespaced, Kind: names.Kind,
			Verbs: verbs, ShortNames: names.ShortNames, Categories: names.Categories, StorageVersionHash: hash,
		}}
		subVerbs := metav1.Verbs{"get", "patch", "update"}
		if sub != nil && sub.Status != nil {
			res.Subresources = append(res.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "status", ResponseKind: kind, Verbs: subVerbs})
			legacy = append(legacy, metav1.APIResource{Name: names.Plural + "/status", Namespaced: namespaced, Kind: names.Kind, Verbs: subVerbs})
		}
		if sub != nil && sub.Scale != nil {
			scale := &metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
			res.Subresources = append(res.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "scale", ResponseKind: scale, Verbs: subVerbs})
			legacy = append(legacy, metav1.APIResource{Name: names.Plural + "/scale", Namespaced: namespaced, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: subVerbs})
		}
		g.legacy[v.Name] = append(g.legacy[v.Name], legacy...)
		g.aggregated[v.Name] = append(g.aggregated[v.Name], res)
	}
}

func (g *group) apiGroup() metav1.APIGroup {
	out := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: g.name}
	for _, v := range g.versions {
		out.Versions = append(out.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g.name + "/" + v, Version: v})
	}
	if len(out.Versions) > 0 {
		out.PreferredVersion = out.Versions[0]
	}
	return out
}

func (g *group) aggregatedGroup() apidiscoveryv2.APIGroupDiscovery {
	out := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.name}}
	for _, v := range g.versions {
		res := append([]apidiscoveryv2.APIResourceDiscovery(nil), g.aggregated[v]...)
		sort.Slice(res, func(i, j int) bool { return res[i].Resource < res[j].Resource })
		out.Versions = append(out.Versions, apidiscoveryv2.APIVersionDiscovery{Version: v, Resources: res, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent})
	}
	return out
}

// serveDiscovery answers /apis, /apis/<group> and /apis/<group>/<version>
// for a cluster with CRDs of its own; it reports whether it answered.
func (s *Server) serveDiscovery(w http.ResponseWriter, req *http.Request, sc scope, inner http.Handler) bool {
	path := strings.TrimSuffix(req.URL.Path, "/")
	rest, ok := strings.CutPrefix(path, "/apis")
	if !ok || (rest != "" && rest[0] != '/') {
		return false
	}
	groups := s.groups(sc)
	if len(groups) == 0 {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	switch {
	case rest == "":
		return s.serveGroupList(w, req, groups, inner)
	case len(parts) == 1:
		for _, g := range groups {
			if g.name == parts[0] {
				writeJSON(w, req, "application/json", g.apiGroup())
				return true
			}
		}
	case len(parts) == 2:
		for _, g := range groups {
			if res, ok := g.legacy[parts[1]]; ok && g.name == parts[0] {
				sort.Slice(res, func(i, j int) bool { return res[i].Name < res[j].Name })
				writeJSON(w, req, "application/json", metav1.APIResourceList{
					TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
					GroupVersion: schema.GroupVersion{Group: g.name, Version: parts[1]}.String(),
					APIResources: res,
				})
				return true
			}
		}
	}
	return false
}

const (
	aggregatedV2      = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	aggregatedV2Beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
)

// serveGroupList merges the built-in and system groups (from inner) with
// the cluster's own, in the form the client asked for: aggregated
// discovery (v2 or v2beta1) or the legacy APIGroupList. It always answers
// in JSON, which every client accepts.
func (s *Server) serveGroupList(w http.ResponseWriter, req *http.Request, groups []*group, inner http.Handler) bool {
	accept := req.Header.Get("Accept")
	want := ""
	if strings.Contains(accept, "as=APIGroupDiscoveryList") {
		want = aggregatedV2
		if !strings.Contains(accept, "v=v2;") && !strings.HasSuffix(accept, "v=v2") && strings.Contains(accept, "v=v2beta1") {
			want = aggregatedV2Beta1
		}
	}
	ask := "application/json"
	if want != "" {
		ask = aggregatedV2
	}
	rec, ok := innerJSON(req, inner, ask)
	if !ok {
		return false
	}
	if want != "" && strings.Contains(rec.header.Get("Content-Type"), "as=APIGroupDiscoveryList") {
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(rec.body.Bytes(), &list); err != nil {
			return false
		}
		for _, g := range groups {
			list.Items = append(list.Items, g.aggregatedGroup())
		}
		list.APIVersion = "apidiscovery.k8s.io/v2"
		if want == aggregatedV2Beta1 {
			list.APIVersion = "apidiscovery.k8s.io/v2beta1"
		}
		list.Kind = "APIGroupDiscoveryList"
		writeJSON(w, req, want, list)
		return true
	}
	var list metav1.APIGroupList
	if err := json.Unmarshal(rec.body.Bytes(), &list); err != nil {
		return false
	}
	for _, g := range groups {
		list.Groups = append(list.Groups, g.apiGroup())
	}
	list.Kind, list.APIVersion = "APIGroupList", "v1"
	writeJSON(w, req, "application/json", list)
	return true
}

// writeJSON writes obj with an ETag, answering 304 when the client has it.
func writeJSON(w http.ResponseWriter, req *http.Request, contentType string, obj interface{}) {
	body, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBody(w, req, contentType, body)
}

func writeBody(w http.ResponseWriter, req *http.Request, contentType string, body []byte) {
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Vary", "Accept")
	if req.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if req.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// recorder captures an inner response.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}
