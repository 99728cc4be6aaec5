// Package crdserving serves custom resources per logical cluster: each
// cluster's own CustomResourceDefinitions decide which custom APIs exist in
// it, with which versions, schemas, printer columns and subresources.
//
// There is one CRD informer for all clusters (a wildcard watch, cached by
// cluster|name). Serving state is built lazily: the first request for a
// custom resource in a cluster builds a handler for that cluster from
// apiextensions-apiserver's exported CRD handler, over a read-only view of
// the shared informer that shows only that cluster's CRDs. The definitions
// of an APIExport are served by one handler per export, shared by all its
// consumers and its view (handlerScope). Idle handlers are dropped by one
// sweeper; nothing runs per cluster.
//
// kcp's own APIs (tenancy.kcp.io) are "system CRDs": they live in the
// logical cluster SystemCluster, are served by the upstream apiextensions
// server and exist in every cluster. Their groups, and every built-in group,
// are reserved: a cluster's CRD never shadows them.
package crdserving

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apihelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	listers "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// SystemCluster holds the system CRDs, served in every logical cluster.
const SystemCluster = logicalcluster.SystemCRDs

// byName indexes CRDs by name across clusters (for wildcard requests).
const byName = "name"

// NewHandlerFunc builds an upstream CRD handler over a view of one
// cluster's CRDs (or, for wildcard requests, one CRD per name).
type NewHandlerFunc func(view *View) (http.Handler, error)

// Extra provides definitions a cluster is served besides its own CRDs
// (those of its APIBindings). Its definitions look like established CRDs
// whose kcp.io/cluster annotation names the cluster. Requests across all
// clusters do not serve them: each export's objects are kept apart, and
// are read across clusters through the export (WithExport).
type Extra interface {
	Definitions(cluster logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition
	Definition(cluster logicalcluster.Name, name string) (*apiextensionsv1.CustomResourceDefinition, bool)
}

// Server is the per-cluster CRD serving layer. Create it with New, give it
// its handler factory and reserved groups with SetUp once the upstream
// servers exist, and start its informer with Start.
type Server struct {
	newHandler NewHandlerFunc
	reserved   func(group string) bool
	idle       time.Duration

	indexer cache.Indexer
	synced  atomic.Bool

	mu        sync.Mutex
	views     map[scope]*View
	listeners []cache.ResourceEventHandler

	openapi  openAPICache
	extras   []Extra
	exported func(identity string) []*apiextensionsv1.CustomResourceDefinition
	// services, if set, calls the Services of a cluster for its CRDs'
	// conversion webhooks (SetServiceConversions).
	services func(cluster logicalcluster.Name) webhook.AuthenticationInfoResolverWrapper
}

// scope is what one upstream handler serves: a cluster's definitions, one
// per name across all clusters, or (identity set, cluster Wildcard) the
// definitions of one APIExport, whose objects are kept apart by identity.
// That last handler serves the export's view across all consumers and
// every consumer's own requests for the export's resources (handlerScope).
type scope struct {
	cluster  logicalcluster.Name
	identity string
}

type exportKey struct{}

// WithExport marks a request across all clusters as one for the objects
// of the APIExport with this identity (set only by the export's view).
func WithExport(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, exportKey{}, identity)
}

func exportFrom(ctx context.Context) string {
	id, _ := ctx.Value(exportKey{}).(string)
	return id
}

// New returns a Server that drops a cluster's handler after idle without
// requests.
func New(idle time.Duration) *Server {
	return &Server{idle: idle, views: map[scope]*View{}, reserved: func(string) bool { return true }}
}

// AddExtra adds a source of definitions served besides each cluster's own;
// for a name several sources define, the first source added wins.
func (s *Server) AddExtra(e Extra) { s.extras = append(s.extras, e) }

// SetExported gives the definitions of an APIExport by identity, which
// requests marked WithExport are served.
func (s *Server) SetExported(f func(identity string) []*apiextensionsv1.CustomResourceDefinition) {
	s.exported = f
}

// Invalidate drops the serving state of clusters whose extra definitions
// changed (and of requests across all clusters); the next request rebuilds
// it.
func (s *Server) Invalidate(clusters []logicalcluster.Name) {
	s.mu.Lock()
	var dropped []*View
	for _, c := range append(clusters, logicalcluster.Wildcard) {
		if v := s.views[scope{cluster: c}]; v != nil {
			delete(s.views, scope{cluster: c})
			dropped = append(dropped, v)
		}
		s.openapi.forget(c)
	}
	s.mu.Unlock()
	s.drop(dropped)
}

// InvalidateExports drops the serving state of every APIExport's view
// (there are few: one per export in use); called when an export or its
// schemas change.
func (s *Server) InvalidateExports() {
	s.mu.Lock()
	var dropped []*View
	for k, v := range s.views {
		if k.identity != "" {
			delete(s.views, k)
			dropped = append(dropped, v)
		}
	}
	s.mu.Unlock()
	s.drop(dropped)
}

// InvalidateExport drops the serving state of one APIExport's view (by
// identity), whose export or schemas changed: the views of other exports
// keep their watch caches.
func (s *Server) InvalidateExport(identity string) {
	s.mu.Lock()
	var dropped []*View
	if v := s.views[scope{cluster: logicalcluster.Wildcard, identity: identity}]; v != nil {
		delete(s.views, v.scope())
		dropped = append(dropped, v)
	}
	s.mu.Unlock()
	s.drop(dropped)
}

// ServesExports reports whether any APIExport's view has serving state.
func (s *Server) ServesExports() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.views {
		if k.identity != "" {
			return true
		}
	}
	return false
}

func (s *Server) drop(dropped []*View) {
	for _, v := range dropped {
		v.dead.Store(true)
		for _, h := range v.handlers {
			h.OnDelete(nil)
		}
	}
}

// SetUp gives the server its handler factory and the groups it must leave
// to the built-in servers.
func (s *Server) SetUp(newHandler NewHandlerFunc, reserved func(group string) bool) {
	s.newHandler, s.reserved = newHandler, reserved
}

// Start runs the shared CRD informer until ctx ends and returns once it
// has synced.
func (s *Server) Start(ctx context.Context, loopback *rest.Config) error {
	client, err := apiextensionsclient.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	indexers := cache.Indexers{byName: func(obj interface{}) ([]string, error) {
		return []string{obj.(*apiextensionsv1.CustomResourceDefinition).Name}, nil
	}}
	for k, v := range clusterinformer.ClusterIndexers {
		indexers[k] = v
	}
	indexer, ctrl := clusterinformer.New(clusterinformer.ListWatch(crds.List, crds.Watch),
		&apiextensionsv1.CustomResourceDefinition{}, indexers, cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj interface{}) { s.dispatch(obj, func(h cache.ResourceEventHandler) { h.OnAdd(obj, false) }) },
			UpdateFunc: func(old, obj interface{}) {
				s.dispatch(obj, func(h cache.ResourceEventHandler) { h.OnUpdate(old, obj) })
			},
			DeleteFunc: func(obj interface{}) { s.dispatch(obj, func(h cache.ResourceEventHandler) { h.OnDelete(obj) }) },
		})
	s.indexer = indexer
	go ctrl.RunWithContext(ctx)
	go s.sweep(ctx)
	if !clusterinformer.WaitForSync(ctx, ctrl.HasSynced) {
		return fmt.Errorf("the CRD informer did not sync")
	}
	s.synced.Store(true)
	return nil
}

// Listen registers a handler for changes to the CRDs of every cluster but
// SystemCluster (the lifecycle controller uses it).
func (s *Server) Listen(h cache.ResourceEventHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, h)
}

// CRDs returns the definitions a cluster is served: its own CRDs from the
// shared cache and, for names it does not define itself, the extra ones.
func (s *Server) CRDs(cluster logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition {
	out := s.LocalCRDs(cluster)
	if len(s.extras) == 0 || cluster.IsWildcard() {
		return out
	}
	taken := map[string]bool{}
	for _, crd := range out {
		taken[crd.Name] = true
	}
	for _, e := range s.extras {
		for _, crd := range e.Definitions(cluster) {
			if !taken[crd.Name] {
				taken[crd.Name] = true
				out = append(out, crd)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LocalCRDs returns a cluster's own CRDs from the shared cache.
func (s *Server) LocalCRDs(cluster logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition {
	if s.indexer == nil {
		return nil
	}
	objs, _ := s.indexer.ByIndex(clusterinformer.ByCluster, string(cluster))
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*apiextensionsv1.CustomResourceDefinition))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// HasLocal reports whether a cluster has a CRD of its own by this name.
func (s *Server) HasLocal(cluster logicalcluster.Name, name string) bool {
	if s.indexer == nil {
		return false
	}
	_, ok, _ := s.indexer.GetByKey(clusterinformer.Key(cluster, "", name))
	return ok
}

// CRD returns one definition a cluster is served: its own CRD, else an
// extra one.
func (s *Server) CRD(cluster logicalcluster.Name, name string) (*apiextensionsv1.CustomResourceDefinition, bool) {
	if s.indexer == nil {
		return nil, false
	}
	obj, ok, err := s.indexer.GetByKey(clusterinformer.Key(cluster, "", name))
	if err == nil && ok {
		return obj.(*apiextensionsv1.CustomResourceDefinition), true
	}
	if !cluster.IsWildcard() {
		for _, e := range s.extras {
			if crd, ok := e.Definition(cluster, name); ok {
				return crd, true
			}
		}
	}
	return nil, false
}

// BoundIdentity is the export identity a cluster's resource is stored
// under: set only for a definition served through an APIBinding (an extra
// source), never taken from a cluster's own CRD, whose annotations the
// tenant writes.
func (s *Server) BoundIdentity(cluster logicalcluster.Name, gr schema.GroupResource) string {
	name := gr.Resource + "." + gr.Group
	if cluster.IsWildcard() || s.indexer == nil || s.HasLocal(cluster, name) {
		return ""
	}
	for _, e := range s.extras {
		if crd, ok := e.Definition(cluster, name); ok {
			return crd.Annotations[apis.IdentityAnnotation]
		}
	}
	return ""
}

// Synced reports whether the shared informer has synced.
func (s *Server) Synced() bool { return s.synced.Load() }

func (s *Server) dispatch(obj interface{}, call func(cache.ResourceEventHandler)) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	cluster := clusterinformer.ClusterOf(crd)
	if cluster == SystemCluster {
		return
	}
	s.openapi.forget(cluster)
	s.mu.Lock()
	targets := append([]cache.ResourceEventHandler(nil), s.listeners...)
	if v := s.views[scope{cluster: cluster}]; v != nil {
		targets = append(targets, v.handlers...)
	}
	wildcard := s.views[scope{cluster: logicalcluster.Wildcard}]
	s.mu.Unlock()
	for _, h := range targets {
		call(h)
	}
	if wildcard != nil {
		// Which cluster's CRD stands for a name may have changed: let the
		// wildcard handler drop whatever no longer matches.
		for _, h := range wildcard.handlers {
			h.OnDelete(obj)
		}
	}
}

// View is what one upstream CRD handler sees of the shared informer: one
// cluster's CRDs, or for the wildcard one definition per name.
type View struct {
	s        *Server
	cluster  logicalcluster.Name
	identity string
	handlers []cache.ResourceEventHandler
	dead     atomic.Bool
	lastUsed atomic.Int64
	// inflight counts an export view's requests being served (watches
	// included): such a view is not idle (see sweep).
	inflight atomic.Int64
	handler  http.Handler
}

// EmptyView is a view that never shows a CRD.
func (s *Server) EmptyView() *View {
	v := &View{s: s}
	v.dead.Store(true)
	return v
}

// Cluster is the logical cluster the view shows (Wildcard for all).
func (v *View) Cluster() logicalcluster.Name { return v.cluster }

// Identity is the export identity objects of gr are stored under in this
// view ("" for a cluster's own CRDs and requests across clusters).
func (v *View) Identity(gr schema.GroupResource) string {
	if v.identity != "" {
		return v.identity
	}
	return v.s.BoundIdentity(v.cluster, gr)
}

// Export is the identity of the APIExport whose objects the view serves
// across all its consumers ("" for a cluster's definitions and for
// requests across clusters without an export).
func (v *View) Export() string { return v.identity }

func (v *View) scope() scope { return scope{cluster: v.cluster, identity: v.identity} }

// Informer is the part of a SharedIndexInformer the upstream handler uses:
// it registers event handlers, which the Server calls for this cluster.
func (v *View) Informer() cache.SharedIndexInformer { return viewInformer{v: v} }

// Lister lists and gets this view's CRDs.
func (v *View) Lister() listers.CustomResourceDefinitionLister { return viewLister{v: v} }

type viewInformer struct {
	cache.SharedIndexInformer // not used by the upstream handler; nil
	v                         *View
}

func (i viewInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	i.v.s.mu.Lock()
	defer i.v.s.mu.Unlock()
	i.v.handlers = append(i.v.handlers, h)
	return nil, nil
}

func (i viewInformer) HasSynced() bool { return i.v.s.Synced() }

type viewLister struct{ v *View }

func (l viewLister) List(selector labels.Selector) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	if l.v.dead.Load() {
		return nil, nil
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, crd := range l.v.s.visible(l.v.scope()) {
		if selector.Matches(labels.Set(crd.Labels)) {
			out = append(out, l.v.servable(crd))
		}
	}
	return out, nil
}

func (l viewLister) Get(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, err := l.get(name)
	if err != nil {
		return nil, err
	}
	return l.v.servable(crd), nil
}

func (l viewLister) get(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	notFound := apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), name)
	if l.v.dead.Load() {
		return nil, notFound
	}
	if l.v.identity != "" {
		for _, crd := range l.v.s.visible(l.v.scope()) {
			if crd.Name == name {
				return crd, nil
			}
		}
		return nil, notFound
	}
	if !l.v.cluster.IsWildcard() {
		if crd, ok := l.v.s.CRD(l.v.cluster, name); ok {
			return crd, nil
		}
		return nil, notFound
	}
	return l.v.s.wildcardCRD(name)
}

// visible returns the CRDs that decide what a cluster serves; across all
// clusters, one definition per name.
func (s *Server) visible(sc scope) []*apiextensionsv1.CustomResourceDefinition {
	if sc.identity != "" {
		if s.exported == nil {
			return nil
		}
		return s.exported(sc.identity)
	}
	cluster := sc.cluster
	if !cluster.IsWildcard() {
		return s.CRDs(cluster)
	}
	names := s.indexer.ListIndexFuncValues(byName)
	sort.Strings(names)
	names = slices.Compact(names)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		if crd, err := s.wildcardCRD(name); err == nil {
			out = append(out, crd)
		}
	}
	return out
}

// representative picks the definition whose names stand for a CRD name
// across all clusters: the established one of the first cluster in name
// order (the system cluster excluded).
func (s *Server) representative(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	rep, _ := s.allNamed(name)
	if rep == nil {
		return nil, apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), name)
	}
	return rep, nil
}

func (s *Server) allNamed(name string) (rep *apiextensionsv1.CustomResourceDefinition, all []*apiextensionsv1.CustomResourceDefinition) {
	objs, _ := s.indexer.ByIndex(byName, name)
	for _, o := range objs {
		crd := o.(*apiextensionsv1.CustomResourceDefinition)
		c := clusterinformer.ClusterOf(crd)
		if c == SystemCluster || !served(crd) {
			continue
		}
		all = append(all, crd)
		if rep == nil || c < clusterinformer.ClusterOf(rep) {
			rep = crd
		}
	}
	return rep, all
}

// wildcardCRD is the definition requests across all clusters are served
// with: the representative's names, scope and printer columns, every
// version any cluster has (served where some cluster serves it), no
// conversion and a schema that keeps every field. Objects come back as
// each cluster stored them, labelled with the requested version; no
// cluster's defaults or pruning apply to another's objects. Its UID
// changes whenever one of the definitions does, which rebuilds storage.
func (s *Server) wildcardCRD(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	rep, all := s.allNamed(name)
	if rep == nil {
		return nil, apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), name)
	}
	out := rep.DeepCopy()
	out.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	out.Spec.PreserveUnknownFields = false
	keep := true
	anything := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &keep}}
	versions := map[string]int{}
	for i := range out.Spec.Versions {
		out.Spec.Versions[i].Schema = anything
		versions[out.Spec.Versions[i].Name] = i
	}
	h := fnv.New64a()
	for _, crd := range all {
		fmt.Fprintf(h, "%s/%s/%s;", clusterinformer.ClusterOf(crd), crd.UID, crd.ResourceVersion)
		for _, v := range crd.Spec.Versions {
			i, ok := versions[v.Name]
			if !ok {
				out.Spec.Versions = append(out.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v.Name, Schema: anything})
				i = len(out.Spec.Versions) - 1
				versions[v.Name] = i
			}
			if v.Served {
				out.Spec.Versions[i].Served = true
			}
		}
	}
	out.UID = types.UID(fmt.Sprintf("wildcard-%x", h.Sum64()))
	return out, nil
}

// handlerFor returns the scope's view with its CRD handler, building it on
// first use.
func (s *Server) handlerFor(sc scope) (*View, error) {
	s.mu.Lock()
	v := s.views[sc]
	s.mu.Unlock()
	if v == nil {
		v = &View{s: s, cluster: sc.cluster, identity: sc.identity}
		h, err := s.newHandler(v)
		if err != nil {
			return nil, err
		}
		v.handler = h
		s.mu.Lock()
		if existing := s.views[sc]; existing != nil {
			v = existing // another request won the race; ours is garbage
		} else {
			s.views[sc] = v
		}
		s.mu.Unlock()
	}
	v.lastUsed.Store(time.Now().UnixNano())
	return v, nil
}

// handlerScope is the scope whose handler serves a resource request of
// sc. A resource a cluster is served through an APIBinding is served by
// the handler of its export, one for all consumers and the export's view:
// what that handler holds does not depend on the consumer. Its definitions
// are the export's (a consumer's differ only in annotations the upstream
// handler does not read), its storage is the export identity's key range
// and takes the logical cluster from each request's context (clusterstore:
// its watch cache over all consumers keys every object by its cluster, as
// the built-in resources' caches do), and admission and authorization see
// each request's cluster. So a consumer
// still reads and writes only its own objects, and a binding costs no
// serving state. Everything else (a cluster's own CRDs, which win over a
// binding, and requests across all clusters) keeps the handler of sc.
func (s *Server) handlerScope(sc scope, gr schema.GroupResource) scope {
	if sc.identity != "" {
		return scope{cluster: logicalcluster.Wildcard, identity: sc.identity}
	}
	if id := s.BoundIdentity(sc.cluster, gr); id != "" {
		return scope{cluster: logicalcluster.Wildcard, identity: id}
	}
	return sc
}

// ActiveClusters is the number of clusters with a built handler.
func (s *Server) ActiveClusters() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.views)
}

// sweep drops the handlers of clusters idle for longer than s.idle; their
// storage is torn down once in-flight requests (watches) have drained.
func (s *Server) sweep(ctx context.Context) {
	if s.idle <= 0 {
		return
	}
	t := time.NewTicker(s.idle / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-s.idle).UnixNano()
		var dropped []*View
		s.mu.Lock()
		for c, v := range s.views {
			// An export's view holds the watch cache of the export's
			// objects in all consumers: while a provider watches it, it
			// stays (a new cache would start from the current revision,
			// and the provider's next watch, from an older one, would
			// have to list everything again).
			if v.lastUsed.Load() < cutoff && v.inflight.Load() == 0 {
				delete(s.views, c)
				dropped = append(dropped, v)
			}
		}
		s.mu.Unlock()
		for _, v := range dropped {
			v.dead.Store(true)
			s.openapi.forget(v.cluster)
			for _, h := range v.handlers {
				h.OnDelete(nil) // the upstream handler lists (nothing) and tears down its storage
			}
		}
		if len(dropped) > 0 {
			klog.V(2).InfoS("dropped idle CRD handlers", "clusters", len(dropped))
		}
	}
}

// Wrap returns the handler that serves each cluster's custom resources,
// discovery and OpenAPI, and passes everything else to inner.
func (s *Server) Wrap(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cluster, ok := logicalcluster.From(req.Context())
		if !ok {
			cluster = logicalcluster.Root
		}
		info, ok := apirequest.RequestInfoFrom(req.Context())
		if !ok || cluster == SystemCluster || !s.Synced() {
			inner.ServeHTTP(w, req)
			return
		}
		sc := scope{cluster: cluster}
		if cluster.IsWildcard() {
			sc.identity = exportFrom(req.Context())
		}
		if info.IsResourceRequest {
			if info.APIPrefix != "apis" || s.reserved(info.APIGroup) || !s.serves(sc, info.Resource+"."+info.APIGroup) {
				inner.ServeHTTP(w, req)
				return
			}
			if msg, refused := s.unconvertible(sc, info); refused {
				st := apierrors.NewBadRequest(msg).Status()
				st.Kind, st.APIVersion = "Status", "v1"
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(st)
				return
			}
			hs := s.handlerScope(sc, schema.GroupResource{Group: info.APIGroup, Resource: info.Resource})
			v, err := s.handlerFor(hs)
			if err != nil {
				klog.ErrorS(err, "building the CRD handler", "cluster", cluster)
				http.Error(w, "the server could not serve custom resources in this logical cluster", http.StatusInternalServerError)
				return
			}
			if hs.identity != "" {
				v.inflight.Add(1)
				defer func() {
					v.lastUsed.Store(time.Now().UnixNano())
					v.inflight.Add(-1)
				}()
			}
			v.handler.ServeHTTP(w, req)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			inner.ServeHTTP(w, req)
			return
		}
		if s.serveDiscovery(w, req, sc, inner) || (!cluster.IsWildcard() && s.serveOpenAPI(w, req, cluster, inner)) {
			return
		}
		inner.ServeHTTP(w, req)
	})
}

// serves reports whether the cluster (or, for the wildcard, any cluster)
// has a CRD of this name.
func (s *Server) serves(sc scope, name string) bool {
	cluster := sc.cluster
	if sc.identity != "" {
		for _, crd := range s.visible(sc) {
			if crd.Name == name {
				return true
			}
		}
		return false
	}
	if cluster.IsWildcard() {
		_, err := s.representative(name)
		return err == nil
	}
	_, ok := s.CRD(cluster, name)
	return ok
}

// ReservedGroups returns the API groups a server's listed paths name
// (/apis/<group>), plus extra ones.
func ReservedGroups(listedPaths []string, extra ...string) func(string) bool {
	groups := sets.New[string](extra...)
	groups.Insert("")
	for _, p := range listedPaths {
		if rest, ok := strings.CutPrefix(p, "/apis/"); ok {
			g, _, _ := strings.Cut(rest, "/")
			groups.Insert(g)
		}
	}
	return groups.Has
}

// AllKeys returns the cache keys (cluster|name) of every CRD outside the
// system cluster.
func (s *Server) AllKeys() []string {
	if s.indexer == nil {
		return nil
	}
	var out []string
	for _, k := range s.indexer.ListKeys() {
		if c, _, _, err := clusterinformer.SplitKey(k); err == nil && c != SystemCluster {
			out = append(out, k)
		}
	}
	return out
}

// ServedVersion returns a version the cluster's own CRD for group and kind
// serves (the storage version when served).
func (s *Server) ServedVersion(cluster logicalcluster.Name, group, kind string) (string, bool) {
	for _, crd := range s.CRDs(cluster) {
		if crd.Spec.Group != group || crd.Status.AcceptedNames.Kind != kind {
			continue
		}
		version := ""
		for _, v := range crd.Spec.Versions {
			if v.Served && (version == "" || v.Storage) {
				version = v.Name
			}
		}
		return version, version != ""
	}
	return "", false
}

// Reserved reports whether a group belongs to the built-in APIs or the
// system CRDs, which a cluster's own CRDs cannot redefine.
func (s *Server) Reserved(group string) bool { return s.reserved(group) }

// served tells whether a CRD's resource, discovery and OpenAPI are served:
// once its names are accepted, as upstream's CRD handler serves it. The
// lifecycle controller sets Established only after this process's cache
// shows the accepted names, so that a client that saw Established finds
// all three.
func served(crd *apiextensionsv1.CustomResourceDefinition) bool {
	return apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) ||
		apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established)
}
