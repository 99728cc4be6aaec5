package routing

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		path, cluster, rest string
		err                 bool
	}{
		{path: "/api/v1/namespaces", cluster: "root", rest: "/api/v1/namespaces"},
		{path: "/", cluster: "root", rest: "/"},
		{path: "/clustersx/root:a/api", cluster: "root", rest: "/clustersx/root:a/api"},
		{path: "/clusters/root:a/api/v1", cluster: "root:a", rest: "/api/v1"},
		{path: "/clusters/root:a", cluster: "root:a", rest: "/"},
		{path: "/clusters/root%3Aa/api", cluster: "root:a", rest: "/api"},
		{path: "/clusters/*/api/v1/configmaps", cluster: "*", rest: "/api/v1/configmaps"},
		{path: "/clusters/root:a/clusters/root:b/api", cluster: "root:a", rest: "/clusters/root:b/api"},
		{path: "/clusters/root%2Fb/api", err: true},
		{path: "/clusters/root:a%2F..%2Froot:b/api", err: true},
		{path: "/clusters/", err: true},
		{path: "/clusters", err: true},
		{path: "/clusters//api", err: true},
		{path: "/clusters/Root/api", err: true},
		{path: "/clusters/acme/api", err: true},
		{path: "/clusters/root:%zz/api", err: true},
		{path: "/clusters/root:a%00/api", err: true},
	}
	for _, c := range cases {
		n, rest, err := Split(c.path)
		if c.err {
			if err == nil {
				t.Errorf("Split(%q) = %q %q, want an error", c.path, n, rest)
			}
			continue
		}
		if err != nil || string(n) != c.cluster || rest != c.rest {
			t.Errorf("Split(%q) = %q %q %v, want %q %q", c.path, n, rest, err, c.cluster, c.rest)
		}
	}
}

func TestFilter(t *testing.T) {
	var gotPath, gotURI string
	var gotCluster logicalcluster.Name
	h := WithLogicalCluster(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotURI = r.URL.Path, r.URL.RequestURI()
		gotCluster, _ = logicalcluster.From(r.Context())
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/clusters/root:a/api/v1/namespaces/x%2Fy/configmaps?limit=1", nil))
	if rec.Code != 200 || gotCluster != "root:a" || gotPath != "/api/v1/namespaces/x/y/configmaps" {
		t.Errorf("got %d %q %q", rec.Code, gotCluster, gotPath)
	}
	// The audit log's requestURI is the path the client sent.
	if want := "/clusters/root:a/api/v1/namespaces/x%2Fy/configmaps?limit=1"; gotURI != want {
		t.Errorf("RequestURI() = %q, want %q", gotURI, want)
	}
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(m, "/clusters/*/api/v1/configmaps", nil))
		if rec.Code != http.StatusMethodNotAllowed || !strings.Contains(rec.Body.String(), "all logical clusters") {
			t.Errorf("%s on wildcard: %d %s", m, rec.Code, rec.Body)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/clusters/root%2Fa/api", nil))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"kind":"Status"`) {
		t.Errorf("invalid cluster: %d %s", rec.Code, rec.Body)
	}
}

// FuzzSplit checks that a cluster Split accepts is always valid and that the
// rest of the path never starts inside the cluster segment.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"/clusters/root:a/api", "/clusters/root%2Fa/x", "/api", "/clusters/*/api", "/clusters/root:a%2f..%2f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		n, rest, err := Split(p)
		if err != nil {
			return
		}
		if _, perr := logicalcluster.Parse(string(n)); perr != nil {
			t.Fatalf("Split(%q) returned invalid cluster %q", p, n)
		}
		if strings.HasPrefix(p, "/clusters/") && !strings.HasSuffix(p, rest) && rest != "/" {
			t.Fatalf("Split(%q) rest %q is not a suffix", p, rest)
		}
	})
}

func TestStockInformerRequest(t *testing.T) {
	for q, want := range map[string]bool{
		"resourceVersion=0&limit=500": true, // a stock reflector's first list
		"sendInitialEvents=true&watch=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan": true, // WatchList
		"resourceVersion=0": false, // kcp's informers: one unpaged list
		"limit=500":         false, // kubectl get
		"":                  false,
		"watch=true&resourceVersion=12&allowWatchBookmarks=true": false,
		"resourceVersion=0&limit=0":                              false,
	} {
		v, _ := url.ParseQuery(q)
		if got := StockInformerRequest(v); got != want {
			t.Errorf("%q: %v, want %v", q, got, want)
		}
	}
}

// The prefix twice (a server-relative URL followed by a client whose server
// URL has the prefix already) is the one cluster; another cluster's name
// stays part of the first cluster's path (which serves nothing there).
func TestDoublePrefix(t *testing.T) {
	var got string
	h := WithLogicalCluster(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := logicalcluster.From(r.Context())
		got = string(c) + " " + r.URL.Path
	}))
	for path, want := range map[string]string{
		"/clusters/root:a/clusters/root:a/openapi/v3/api/v1": "root:a /openapi/v3/api/v1",
		"/clusters/root:a/api/v1":                            "root:a /api/v1",
		"/clusters/root:a/clusters/root:b/api/v1":            "root:a /clusters/root:b/api/v1",
		"/clusters/root:a/clusters/Bad_Name/api/v1":          "root:a /clusters/Bad_Name/api/v1",
	} {
		got = ""
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if want == "400" {
			if rec.Code != 400 || got != "" {
				t.Errorf("%s: %d %q, want 400", path, rec.Code, got)
			}
			continue
		}
		if got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// TestTokenCluster: without a /clusters/ prefix, an API request with one of
// kcp's service-account tokens goes to the cluster its claim names; other
// paths, other tokens and malformed claims stay where the path says.
func TestTokenCluster(t *testing.T) {
	jwt := func(claims string) string {
		enc := base64.RawURLEncoding.EncodeToString
		return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".c2ln"
	}
	var gotCluster logicalcluster.Name
	var gotPath string
	h := WithLogicalCluster(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotCluster, _ = logicalcluster.From(r.Context())
		gotPath = r.URL.Path
	}))
	for _, c := range []struct {
		path, auth string
		want       logicalcluster.Name
	}{
		{"/api/v1/namespaces/a/configmaps", "Bearer " + jwt(`{"kcp.io/cluster":"root:team-a"}`), "root:team-a"},
		{"/apis", "bearer " + jwt(`{"kcp.io/cluster":"root:team-a"}`), "root:team-a"},
		// The path's cluster wins over the token's.
		{"/clusters/root:b/api/v1/pods", "Bearer " + jwt(`{"kcp.io/cluster":"root:team-a"}`), "root:b"},
		// Not an API path: server-wide endpoints stay the server's.
		{"/healthz", "Bearer " + jwt(`{"kcp.io/cluster":"root:team-a"}`), "root"},
		{"/metrics", "Bearer " + jwt(`{"kcp.io/cluster":"root:team-a"}`), "root"},
		// No claim, a wildcard, a malformed name, garbage, another scheme.
		{"/api", "Bearer " + jwt(`{"sub":"x"}`), "root"},
		{"/api", "Bearer " + jwt(`{"kcp.io/cluster":"*"}`), "root"},
		{"/api", "Bearer " + jwt(`{"kcp.io/cluster":"root/../x"}`), "root"},
		{"/api", "Bearer " + jwt(`{"kcp.io/cluster":42}`), "root"},
		{"/api", "Bearer not.a.jwt!", "root"},
		{"/api", "Basic " + jwt(`{"kcp.io/cluster":"root:team-a"}`), "root"},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		req.Header.Set("Authorization", c.auth)
		rec := httptest.NewRecorder()
		gotCluster = ""
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || gotCluster != c.want {
			t.Errorf("%s with %q: cluster %q (code %d), want %q", c.path, c.auth, gotCluster, rec.Code, c.want)
		}
		if strings.HasPrefix(c.path, "/api") && gotPath != c.path {
			t.Errorf("%s: path became %q", c.path, gotPath)
		}
	}
}
