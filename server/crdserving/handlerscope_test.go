package crdserving

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// boundExtra serves, in each listed cluster, the export's definitions
// (with that cluster's annotation, as boundapis does).
type boundExtra struct {
	clusters map[logicalcluster.Name]bool
	defs     []*apiextensionsv1.CustomResourceDefinition
}

func (e boundExtra) Definitions(c logicalcluster.Name) []*apiextensionsv1.CustomResourceDefinition {
	if !e.clusters[c] {
		return nil
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, d := range e.defs {
		d = d.DeepCopy()
		d.Annotations[logicalcluster.Annotation] = string(c)
		out = append(out, d)
	}
	return out
}

func (e boundExtra) Definition(c logicalcluster.Name, name string) (*apiextensionsv1.CustomResourceDefinition, bool) {
	for _, d := range e.Definitions(c) {
		if d.Name == name {
			return d, true
		}
	}
	return nil, false
}

func established(cluster logicalcluster.Name, identity string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "databases.platform.example.com", UID: types.UID("u-" + string(cluster)),
			Annotations: map[string]string{logicalcluster.Annotation: string(cluster)}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "platform.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "databases", Kind: "Database"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true}}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
			{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}},
	}
	if identity != "" {
		crd.Annotations[apis.IdentityAnnotation] = identity
	}
	return crd
}

// testServer is a Server with root:own's CRD of databases, the export
// id-1 bound in root:a, root:b and root:own, the export id-2 bound in
// root:c, and handlers that answer with their scope (X-View). built holds
// the views built so far; serve sends a list of databases in a cluster.
func testServer(t *testing.T, idle time.Duration) (s *Server, built map[scope]*View, export *apiextensionsv1.CustomResourceDefinition, serve func(logicalcluster.Name) string) {
	s = New(idle)
	indexers := cache.Indexers{byName: func(obj interface{}) ([]string, error) {
		return []string{obj.(*apiextensionsv1.CustomResourceDefinition).Name}, nil
	}}
	for k, v := range clusterinformer.ClusterIndexers {
		indexers[k] = v
	}
	s.indexer = cache.NewIndexer(clusterinformer.KeyFunc, indexers)
	s.synced.Store(true)
	if err := s.indexer.Add(established("root:own", "")); err != nil {
		t.Fatal(err)
	}
	export = established("root:platform", "id-1")
	other := established("root:platform2", "id-2")
	s.AddExtra(boundExtra{clusters: map[logicalcluster.Name]bool{"root:a": true, "root:b": true, "root:own": true}, defs: []*apiextensionsv1.CustomResourceDefinition{export}})
	s.AddExtra(boundExtra{clusters: map[logicalcluster.Name]bool{"root:c": true}, defs: []*apiextensionsv1.CustomResourceDefinition{other}})
	s.SetExported(func(id string) []*apiextensionsv1.CustomResourceDefinition {
		switch id {
		case "id-1":
			return []*apiextensionsv1.CustomResourceDefinition{export}
		case "id-2":
			return []*apiextensionsv1.CustomResourceDefinition{other}
		}
		return nil
	})
	var mu sync.Mutex
	built = map[scope]*View{}
	s.SetUp(func(v *View) (http.Handler, error) {
		mu.Lock()
		defer mu.Unlock()
		built[v.scope()] = v
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("X-View", string(v.Cluster())+"/"+v.identity)
		}), nil
	}, func(string) bool { return false })
	h := s.Wrap(http.NotFoundHandler())
	serve = func(cluster logicalcluster.Name) string {
		ctx := logicalcluster.WithCluster(context.Background(), cluster)
		ctx = apirequest.WithRequestInfo(ctx, &apirequest.RequestInfo{IsResourceRequest: true, APIPrefix: "apis", APIGroup: "platform.example.com",
			APIVersion: "v1", Resource: "databases", Verb: "list", Namespace: "default"})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/apis/platform.example.com/v1/namespaces/default/databases", nil).WithContext(ctx))
		return w.Header().Get("X-View")
	}
	return s, built, export, serve
}

// TestHandlerScope: the consumers of one export share one handler, which
// lists only the export's definitions; a workspace's own CRD of the same
// name keeps a handler of its own, and so does another export.
func TestHandlerScope(t *testing.T) {
	s, built, export, serve := testServer(t, 0)
	for cluster, want := range map[logicalcluster.Name]string{
		"root:a":   "*/id-1",
		"root:b":   "*/id-1",
		"root:c":   "*/id-2",
		"root:own": "root:own/", // its own CRD wins over its binding
	} {
		if got := serve(cluster); got != want {
			t.Errorf("a request in %s was served by the handler of %q, want %q", cluster, got, want)
		}
	}
	// Across all clusters: the clusters' own CRDs, not an export's (those
	// only through the export's view, which marks its requests).
	if got := serve(logicalcluster.Wildcard); got != "*/" {
		t.Errorf("a request across all clusters was served by the handler of %q, want the one across clusters (*/)", got)
	}
	if n := s.ActiveClusters(); n != 4 {
		var scopes []string
		for sc := range built {
			scopes = append(scopes, string(sc.cluster)+"/"+sc.identity)
		}
		sort.Strings(scopes)
		t.Errorf("%d handlers built (%v), want 4: one per export, one for root:own and one across clusters", n, scopes)
	}
	// The shared handler sees the export's definitions only, whoever asked.
	shared := built[scope{cluster: logicalcluster.Wildcard, identity: "id-1"}]
	if shared == nil {
		t.Fatal("no handler for the export id-1")
	}
	list, _ := shared.Lister().List(labels.Everything())
	if len(list) != 1 || list[0] != export {
		t.Errorf("the shared handler lists %v, want the export's definition", list)
	}
	if id := shared.Identity(schema.GroupResource{Group: "platform.example.com", Resource: "databases"}); id != "id-1" {
		t.Errorf("the shared handler stores under identity %q, want id-1", id)
	}
}

// TestSharedHandlerIdle: the export's handler is dropped once no consumer
// has used it for the idle time, and the next request builds a new one.
func TestSharedHandlerIdle(t *testing.T) {
	s, built, _, serve := testServer(t, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.sweep(ctx)
	if got := serve("root:a"); got != "*/id-1" {
		t.Fatalf("served by %q", got)
	}
	first := built[scope{cluster: logicalcluster.Wildcard, identity: "id-1"}]
	for deadline := time.Now().Add(time.Minute); !first.dead.Load(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle shared handler was not dropped")
		}
	}
	if n := s.ActiveClusters(); n != 0 {
		t.Errorf("%d handlers after the idle drop, want 0", n)
	}
	if got := serve("root:b"); got != "*/id-1" {
		t.Fatalf("served by %q after the drop", got)
	}
	if built[scope{cluster: logicalcluster.Wildcard, identity: "id-1"}] == first {
		t.Error("the next request after the drop reused the dropped handler")
	}
}
