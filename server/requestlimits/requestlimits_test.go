package requestlimits

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWithURILimit(t *testing.T) {
	h := WithURILimit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	for n, want := range map[int]int{10: 200, MaxURIBytes - 100: 200, MaxURIBytes + 1: 414, 100_000: 414} {
		r := httptest.NewRequest("GET", "/api/v1/namespaces/"+strings.Repeat("a", n), nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("path of %d bytes: %d, want %d", n, w.Code, want)
		}
		if w.Body.Len() > 1000 {
			t.Errorf("path of %d bytes: the answer is %d bytes long", n, w.Body.Len())
		}
	}
}
