package frontproxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kcpsql/kcp/server/shards"
)

func TestCompositeResourceVersion(t *testing.T) {
	rvs := map[string]string{"root": "120", "eu-2": "7"}
	enc := encodeRV(rvs)
	got, ok := decodeRV(enc)
	if !ok || got["root"] != "120" || got["eu-2"] != "7" || len(got) != 2 {
		t.Fatalf("decodeRV(encodeRV(%v)) = %v, %v", rvs, got, ok)
	}
	for _, bad := range []string{"", "0", "120", "shards.", "shards.!!", "shards.e30x"} {
		if _, ok := decodeRV(bad); ok && bad != "shards." {
			t.Errorf("decodeRV(%q) accepted", bad)
		}
	}
	p := &Proxy{cfg: &shards.Config{Shards: []shards.Shard{{Name: "root"}, {Name: "eu-2"}}}}
	w := httptest.NewRecorder()
	if _, ok := p.rvsFor(w, "120", true); ok || w.Code != http.StatusGone {
		t.Errorf("a watch from one shard's resourceVersion: ok=%v code=%d, want 410", ok, w.Code)
	}
	w = httptest.NewRecorder()
	if _, ok := p.rvsFor(w, "120", false); ok || w.Code != http.StatusBadRequest {
		t.Errorf("a list at one shard's resourceVersion: ok=%v code=%d, want 400", ok, w.Code)
	}
	if m, ok := p.rvsFor(httptest.NewRecorder(), enc, true); !ok || m["root"] != "120" || m["eu-2"] != "7" {
		t.Errorf("rvsFor(composite) = %v, %v", m, ok)
	}
	if m, ok := p.rvsFor(httptest.NewRecorder(), "0", false); !ok || m["root"] != "0" || m["eu-2"] != "0" {
		t.Errorf("rvsFor(0) = %v, %v", m, ok)
	}
}

func TestJSONOnly(t *testing.T) {
	for in, want := range map[string]string{
		"":                                    "application/json",
		"application/vnd.kubernetes.protobuf": "application/json",
		"application/vnd.kubernetes.protobuf, application/json":                                                           "application/json",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
	} {
		if got := jsonOnly(in); got != want {
			t.Errorf("jsonOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestViewWorkspace(t *testing.T) {
	for path, want := range map[string]string{
		"/services/syncer/root:compute/east/clusters/*/api/v1/configmaps": "root:compute",
		"/services/apiexport/root:team-b:stay/widgets/clusters/*/apis":    "root:team-b:stay",
		"/services/syncer/":                   "",
		"/services/syncer/Root/x":             "",
		"/services/apiexport/*/x":             "",
		"/clusters/root:a/services/syncer/x/": "",
		"/api/v1/namespaces":                  "",
	} {
		c, ok := viewWorkspace(path)
		if string(c) != want || ok != (want != "") {
			t.Errorf("viewWorkspace(%q) = %q, %v; want %q", path, c, ok, want)
		}
	}
}
