// Package errorlimit keeps error responses small and readable. A
// validation error can quote a whole schema back (an enum of 100,000 values
// listed in every "supported values" message made a 3.4 MB answer); such a
// Status is cut to a readable size before it leaves the server. A failed
// discovery request answers its message as text/plain (see
// isDiscoveryRequest). Successful responses and watches pass through
// untouched.
package errorlimit

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
)

const (
	// MaxBody is the largest error body sent as is.
	MaxBody = 64 << 10
	// maxMessage and maxCauses bound what a cut Status keeps.
	maxMessage      = 4 << 10
	maxCauseMessage = 1 << 10
	maxCauses       = 20
)

// WithLimit wraps h so that JSON error bodies over MaxBody are cut.
func WithLimit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := &limitWriter{ResponseWriter: w, plain: isDiscoveryRequest(r)}
		h.ServeHTTP(responsewriter.WrapForHTTP1Or2(lw), r)
		lw.finish()
	})
}

type limitWriter struct {
	http.ResponseWriter
	code      int
	buffering bool
	buf       bytes.Buffer
	plain     bool // answer the Status's message as text/plain
}

// isDiscoveryRequest: GET /api, /api/v1, /apis, /apis/<group> or
// /apis/<group>/<version>. client-go's discovery client reads those answers
// raw and, for any content type but text/plain, reports every failure as
// "unknown": kubectl api-resources, and any kubectl command whose discovery
// cache is cold, printed "Error from server (Forbidden): unknown" for a
// workspace that does not exist, where the server had said why.
func isDiscoveryRequest(r *http.Request) bool {
	return IsDiscovery(r.Method, r.URL.Path)
}

// IsDiscovery reports whether method and path (without /clusters/<name>)
// are a discovery request (isDiscoveryRequest).
func IsDiscovery(method, path string) bool {
	if method != http.MethodGet {
		return false
	}
	p := strings.TrimSuffix(path, "/")
	switch {
	case p == "/api" || p == "/api/v1" || p == "/apis":
		return true
	case strings.HasPrefix(p, "/apis/"):
		return strings.Count(p, "/") <= 3
	}
	return false
}

func (w *limitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *limitWriter) WriteHeader(code int) {
	if w.code != 0 {
		return
	}
	w.code = code
	if code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		// Hold the body back until it is complete; the length changes.
		w.buffering = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *limitWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.buffering {
		return w.buf.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *limitWriter) finish() {
	if !w.buffering {
		return
	}
	body := w.buf.Bytes()
	if w.Header().Get("Content-Encoding") == "gzip" && len(body) > MaxBody/16 {
		// Upstream compresses large answers; look inside.
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			if plain, err := io.ReadAll(io.LimitReader(zr, 64<<20)); err == nil && len(plain) > MaxBody {
				if cut, ok := Cut(plain); ok {
					body = cut
					w.Header().Del("Content-Encoding")
				}
			}
		}
	} else if len(body) > MaxBody {
		if cut, ok := Cut(body); ok {
			body = cut
		}
	}
	if w.plain && w.Header().Get("Content-Encoding") == "" {
		var st metav1.Status
		if err := json.Unmarshal(body, &st); err == nil && st.Kind == "Status" && st.Message != "" {
			body = []byte(st.Message + "\n")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.ResponseWriter.WriteHeader(w.code)
	w.ResponseWriter.Write(body)
}

// Cut shortens an encoded Status: its message and the messages of its first
// causes are cut to maxMessage bytes, the other causes are dropped, and the
// message says how much was left out. Anything that is not a JSON object is
// left alone.
func Cut(body []byte) ([]byte, bool) {
	var st map[string]any
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, false
	}
	if msg, ok := st["message"].(string); ok {
		st["message"] = cutString(msg, maxMessage) + fmt.Sprintf(" (error cut from %d bytes)", len(body))
	}
	if details, ok := st["details"].(map[string]any); ok {
		if causes, ok := details["causes"].([]any); ok {
			if len(causes) > maxCauses {
				causes = causes[:maxCauses]
			}
			for _, c := range causes {
				if cm, ok := c.(map[string]any); ok {
					if m, ok := cm["message"].(string); ok {
						cm["message"] = cutString(m, maxCauseMessage)
					}
				}
			}
			details["causes"] = causes
		}
	}
	out, err := json.Marshal(st)
	if err != nil || len(out) >= len(body) {
		return nil, false
	}
	return out, true
}

func cutString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
