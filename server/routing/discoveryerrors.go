package routing

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WithReadableDiscoveryErrors answers a failed discovery request (GET /api,
// /api/v1, /apis, /apis/<group>, /apis/<group>/<version>) with the message
// of its Status as text/plain, same status code. client-go's discovery
// client reads those answers raw and, for any content type but text/plain,
// reports every failure as "unknown": kubectl api-resources, and any kubectl
// command whose discovery cache is cold, printed "Error from server
// (Forbidden): unknown" for a workspace that does not exist, where the
// server had said why. Other requests keep their JSON Status.
func WithReadableDiscoveryErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !isDiscoveryPath(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		dw := &discoveryErrorWriter{ResponseWriter: w}
		h.ServeHTTP(dw, r)
		dw.finish()
	})
}

func isDiscoveryPath(p string) bool {
	p = strings.TrimSuffix(p, "/")
	switch {
	case p == "/api" || p == "/api/v1" || p == "/apis":
		return true
	case strings.HasPrefix(p, "/apis/"):
		return strings.Count(p, "/") <= 3
	}
	return false
}

// discoveryErrorWriter holds back a JSON error answer so that finish can
// rewrite it; anything else passes through.
type discoveryErrorWriter struct {
	http.ResponseWriter
	code    int
	holding bool
	body    bytes.Buffer
}

func (d *discoveryErrorWriter) WriteHeader(code int) {
	if d.code != 0 {
		return
	}
	d.code = code
	if code >= 400 && strings.HasPrefix(d.Header().Get("Content-Type"), "application/json") {
		d.holding = true
		return
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *discoveryErrorWriter) Write(b []byte) (int, error) {
	if d.code == 0 {
		d.WriteHeader(http.StatusOK)
	}
	if d.holding {
		return d.body.Write(b)
	}
	return d.ResponseWriter.Write(b)
}

func (d *discoveryErrorWriter) finish() {
	if !d.holding {
		return
	}
	body := d.body.Bytes()
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err == nil && st.Kind == "Status" && st.Message != "" {
		body = []byte(st.Message + "\n")
		d.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	d.Header().Set("Content-Length", strconv.Itoa(len(body)))
	d.ResponseWriter.WriteHeader(d.code)
	_, _ = d.ResponseWriter.Write(body)
}
