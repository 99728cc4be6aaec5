package crdserving

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	openapi_v3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const (
	protoV2 = "application/com.github.proto-openapi.spec.v2"
	protoV3 = "application/com.github.proto-openapi.spec.v3"
)

// openAPICache keeps built documents per cluster until its CRDs change.
type openAPICache struct {
	mu      sync.Mutex
	entries map[logicalcluster.Name]*openAPIEntry
}

type openAPIEntry struct {
	v2Static string // ETag of the inner document v2 was merged with
	v2       []byte
	v3       map[string][]byte // by "apis/<group>/<version>"
}

func (c *openAPICache) get(cluster logicalcluster.Name) *openAPIEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[logicalcluster.Name]*openAPIEntry{}
	}
	e := c.entries[cluster]
	if e == nil {
		e = &openAPIEntry{v3: map[string][]byte{}}
		c.entries[cluster] = e
	}
	return e
}

func (c *openAPICache) forget(cluster logicalcluster.Name) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, cluster)
}

// clusterPrefix is what a client must put before server-relative URLs to
// stay in the cluster it asked about.
func clusterPrefix(req *http.Request, cluster logicalcluster.Name) string {
	if strings.HasPrefix(req.RequestURI, "/clusters/") {
		return "/clusters/" + string(cluster)
	}
	return ""
}

// serveOpenAPI answers /openapi/v2, /openapi/v3 and
// /openapi/v3/apis/<group>/<version> for clusters with CRDs of their own.
// The v3 index always carries the cluster prefix in its URLs, so that a
// client following them stays in its cluster.
func (s *Server) serveOpenAPI(w http.ResponseWriter, req *http.Request, cluster logicalcluster.Name, inner http.Handler) bool {
	path := strings.TrimSuffix(req.URL.Path, "/")
	switch {
	case path == "/openapi/v3":
		return s.serveV3Index(w, req, cluster, inner)
	case strings.HasPrefix(path, "/openapi/v3/apis/"):
		return s.serveV3GroupVersion(w, req, cluster, strings.TrimPrefix(path, "/openapi/v3/"))
	case path == "/openapi/v2":
		return s.serveV2(w, req, cluster, inner)
	}
	return false
}

// v3Specs builds the OpenAPI v3 document of every group/version the
// cluster's CRDs serve.
func (s *Server) v3Specs(cluster logicalcluster.Name) (map[string][]*apiextensionsv1.CustomResourceDefinition, error) {
	out := map[string][]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range s.CRDs(cluster) {
		if !served(crd) || s.reserved(crd.Spec.Group) {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				p := "apis/" + crd.Spec.Group + "/" + v.Name
				out[p] = append(out[p], crd)
			}
		}
	}
	return out, nil
}

func (s *Server) v3Document(cluster logicalcluster.Name, gvPath string) ([]byte, bool, error) {
	all, err := s.v3Specs(cluster)
	if err != nil {
		return nil, false, err
	}
	crds := all[gvPath]
	if len(crds) == 0 {
		return nil, false, nil
	}
	e := s.openapi.get(cluster)
	s.openapi.mu.Lock()
	doc, ok := e.v3[gvPath]
	s.openapi.mu.Unlock()
	if ok {
		return doc, true, nil
	}
	version := gvPath[strings.LastIndex(gvPath, "/")+1:]
	specs := make([]*spec3.OpenAPI, 0, len(crds))
	for _, crd := range crds {
		sp, err := builder.BuildOpenAPIV3(crd, version, builder.Options{V2: false, IncludeSelectableFields: true})
		if err != nil {
			return nil, false, fmt.Errorf("building OpenAPI v3 of %s: %v", crd.Name, err)
		}
		specs = append(specs, sp)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, false, err
	}
	doc, err = json.Marshal(merged)
	if err != nil {
		return nil, false, err
	}
	s.openapi.mu.Lock()
	e.v3[gvPath] = doc
	s.openapi.mu.Unlock()
	return doc, true, nil
}

func hashOf(doc []byte) string {
	sum := sha512.Sum512(doc)
	return fmt.Sprintf("%X", sum)
}

func (s *Server) serveV3Index(w http.ResponseWriter, req *http.Request, cluster logicalcluster.Name, inner http.Handler) bool {
	rec, ok := innerJSON(req, inner, "application/json")
	if !ok {
		return false
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(rec.body.Bytes(), &index); err != nil {
		return false
	}
	prefix := clusterPrefix(req, cluster)
	for p, v := range index.Paths {
		v.ServerRelativeURL = prefix + v.ServerRelativeURL
		index.Paths[p] = v
	}
	specs, err := s.v3Specs(cluster)
	if err != nil {
		return false
	}
	for p := range specs {
		if _, builtin := index.Paths[p]; builtin {
			continue
		}
		doc, ok, err := s.v3Document(cluster, p)
		if err != nil || !ok {
			continue
		}
		v := index.Paths[p]
		v.ServerRelativeURL = prefix + "/openapi/v3/" + p + "?hash=" + hashOf(doc)
		index.Paths[p] = v
	}
	w.Header().Set("Cache-Control", "no-cache, private")
	writeJSON(w, req, "application/json", index)
	return true
}

func (s *Server) serveV3GroupVersion(w http.ResponseWriter, req *http.Request, cluster logicalcluster.Name, gvPath string) bool {
	doc, ok, err := s.v3Document(cluster, gvPath)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return true
	}
	if !ok {
		return false
	}
	if h := req.URL.Query().Get("hash"); h != "" && h == hashOf(doc) {
		w.Header().Set("Cache-Control", "public, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache, private")
	}
	writeDocument(w, req, doc, protoV3, func(b []byte) (proto.Message, error) { return openapi_v3.ParseDocument(b) })
	return true
}

// writeDocument writes an OpenAPI document as JSON, or as protobuf when
// the client asks for protoType first.
func writeDocument(w http.ResponseWriter, req *http.Request, doc []byte, protoType string, parse func([]byte) (proto.Message, error)) {
	if !wantsOnly(req, protoType) {
		writeBody(w, req, "application/json", doc)
		return
	}
	m, err := parse(doc)
	var pb []byte
	if err == nil {
		pb, err = proto.Marshal(m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// Upstream answers both the old "@v1.0" and the ".v1.0" request with the
	// ".v1.0" type: "@" is not valid in a media type, and Go clients fail
	// to parse it.
	writeBody(w, req, protoType+".v1.0+protobuf", pb)
}

// innerJSON asks the upstream servers for the JSON form of what req asks
// for; ok is false when they do not answer 200.
func innerJSON(req *http.Request, inner http.Handler, accept string) (*recorder, bool) {
	sub := req.Clone(req.Context())
	sub.Header.Set("Accept", accept)
	sub.Header.Del("If-None-Match")
	sub.Header.Del("Accept-Encoding")
	rec := &recorder{header: http.Header{}}
	inner.ServeHTTP(rec, sub)
	return rec, rec.code == 0 || rec.code == http.StatusOK
}

// wantsOnly reports whether the client asked for the protobuf form first.
func wantsOnly(req *http.Request, mediaType string) bool {
	accept := req.Header.Get("Accept")
	first, _, _ := strings.Cut(accept, ",")
	return strings.HasPrefix(strings.TrimSpace(first), mediaType)
}

// serveV2 merges the cluster's CRDs into the built-in OpenAPI v2 document.
func (s *Server) serveV2(w http.ResponseWriter, req *http.Request, cluster logicalcluster.Name, inner http.Handler) bool {
	specs, err := s.v3Specs(cluster)
	if err != nil || len(specs) == 0 {
		return false
	}
	rec, ok := innerJSON(req, inner, "application/json")
	if !ok {
		return false
	}
	staticTag := rec.header.Get("ETag")
	e := s.openapi.get(cluster)
	s.openapi.mu.Lock()
	doc := e.v2
	if e.v2Static != staticTag || staticTag == "" {
		doc = nil
	}
	s.openapi.mu.Unlock()
	if doc == nil {
		var static spec.Swagger
		if err := json.Unmarshal(rec.body.Bytes(), &static); err != nil {
			return false
		}
		var crdSpecs []*spec.Swagger
		seen := map[string]bool{}
		paths := make([]string, 0, len(specs))
		for p := range specs {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			version := p[strings.LastIndex(p, "/")+1:]
			for _, crd := range specs[p] {
				if seen[crd.Name+"/"+version] {
					continue
				}
				seen[crd.Name+"/"+version] = true
				sp, err := builder.BuildOpenAPIV2(crd, version, builder.Options{V2: true, IncludeSelectableFields: true})
				if err != nil {
					continue
				}
				crdSpecs = append(crdSpecs, sp)
			}
		}
		merged, err := builder.MergeSpecs(&static, crdSpecs...)
		if err != nil {
			return false
		}
		if doc, err = json.Marshal(merged); err != nil {
			return false
		}
		s.openapi.mu.Lock()
		e.v2, e.v2Static = doc, staticTag
		s.openapi.mu.Unlock()
	}
	writeDocument(w, req, doc, protoV2, func(b []byte) (proto.Message, error) { return openapi_v2.ParseDocument(b) })
	return true
}
