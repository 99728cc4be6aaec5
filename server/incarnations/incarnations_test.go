package incarnations

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestWithIncarnations(t *testing.T) {
	lookups := 0
	tr := &Tracker{
		CreateRevision: func(context.Context, logicalcluster.Name) (int64, error) {
			lookups++
			return 100, nil
		},
	}
	h := WithIncarnations(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }), tr)
	token := func(rv string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":` + rv + `,"start":"x/"}`))
	}
	for _, tc := range []struct {
		cluster logicalcluster.Name
		query   string
		want    int
	}{
		{"root:a", "", 200},
		{"root:a", "resourceVersion=0", 200},
		{"root:a", "resourceVersion=99&resourceVersionMatch=Exact", 410},
		{"root:a", "resourceVersion=100", 200},
		{"root:a", "resourceVersion=99", 200},
		{"root:a", "resourceVersion=99&resourceVersionMatch=NotOlderThan", 200},
		{"root:a", "resourceVersion=99&limit=10", 410},
		{"root:a", "resourceVersion=99&limit=10&resourceVersionMatch=NotOlderThan", 200},
		{"root:a", "watch=1&resourceVersion=50", 410},
		{"root:a", "limit=1&continue=" + token("42"), 410},
		{"root:a", "limit=1&continue=" + token("142"), 200},
		{"root:a", "resourceVersion=150&continue=" + token("42"), 410},
		{"root:a", "resourceVersion=abc", 200},
		{"root", "resourceVersion=5", 200},
		{"*", "resourceVersion=5", 200},
	} {
		r := httptest.NewRequest("GET", "/api/v1/secrets?"+tc.query, nil)
		verb := "list"
		if strings.Contains(tc.query, "watch=1") {
			verb = "watch"
		}
		ctx := request.WithRequestInfo(r.Context(), &request.RequestInfo{IsResourceRequest: true, Verb: verb, Resource: "secrets"})
		r = r.WithContext(logicalcluster.WithCluster(ctx, tc.cluster))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s ?%s = %d, want %d: %s", tc.cluster, tc.query, w.Code, tc.want, w.Body)
		}
	}
	if lookups != 6 {
		t.Errorf("the incarnation's start was looked up %d times, want 6 (once per request reading the past outside root)", lookups)
	}
}
