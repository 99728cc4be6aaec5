package errorlimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLargeErrorIsCut(t *testing.T) {
	var causes []map[string]string
	for i := 0; i < 100; i++ {
		causes = append(causes, map[string]string{"field": fmt.Sprintf("spec.f%d", i), "message": "supported values: " + strings.Repeat(`"v", `, 20000)})
	}
	st := map[string]any{"kind": "Status", "code": 422, "message": strings.Repeat("Unsupported value ", 100000), "details": map[string]any{"causes": causes}}
	big, _ := json.Marshal(st)
	h := WithLimit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(422)
		w.Write(big)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/api/v1/namespaces/default/configmaps", nil))
	if rec.Code != 422 {
		t.Fatalf("code %d, want 422", rec.Code)
	}
	if rec.Body.Len() > MaxBody {
		t.Fatalf("body of %d bytes (from %d), want at most %d", rec.Body.Len(), len(big), MaxBody)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("cut body is not JSON: %v", err)
	}
	if got["kind"] != "Status" || !strings.Contains(got["message"].(string), "error cut from") {
		t.Fatalf("cut status lost its shape: kind %v, message %.100q", got["kind"], got["message"])
	}
}

func TestSmallErrorAndSuccessPassThrough(t *testing.T) {
	for _, code := range []int{200, 404} {
		body := `{"kind":"Status","message":"` + strings.Repeat("x", 100) + `"}`
		if code == 200 {
			body = strings.Repeat("y", 2*MaxBody) // a large success is never touched
		}
		h := WithLimit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			w.Write([]byte(body))
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != code || rec.Body.String() != body {
			t.Errorf("code %d: changed to %d / %d bytes", code, rec.Code, rec.Body.Len())
		}
	}
}

func TestReadableDiscoveryErrors(t *testing.T) {
	status := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"logical cluster root:nope does not exist","reason":"Forbidden","code":403}`
	h := WithLimit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("ok") != "" {
			_, _ = w.Write([]byte(`{"kind":"APIVersions"}`))
			return
		}
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(status))
	}))
	for _, tc := range []struct {
		method, path string
		code         int
		contentType  string
		body         string
	}{
		{"GET", "/api", 403, "text/plain; charset=utf-8", "logical cluster root:nope does not exist\n"},
		{"GET", "/apis/apps/v1", 403, "text/plain; charset=utf-8", "logical cluster root:nope does not exist\n"},
		{"GET", "/apis?ok=1", 200, "application/json", `{"kind":"APIVersions"}`},
		{"GET", "/api/v1/namespaces", 403, "application/json", status},
		{"POST", "/api", 403, "application/json", status},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || rec.Header().Get("Content-Type") != tc.contentType || rec.Body.String() != tc.body {
			t.Errorf("%s %s: %d %q %q", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
		}
	}
}
