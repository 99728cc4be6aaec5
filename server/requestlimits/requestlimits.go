// Package requestlimits refuses requests too large to be meant, before any
// other handler parses them, with the status code that says which limit was
// hit.
package requestlimits

import (
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxURIBytes bounds the request target (path and query). Go's HTTP servers
// take up to 1 MiB of headers, so a long path reached every handler and each
// error message repeated it (a 100 KB path earned a 300 KB 403); common
// HTTP/2 clients (nghttp2, curl) cannot even send more than 64 KiB of
// headers and fail the request on their side. No Kubernetes request needs
// more: long selectors belong in several requests.
const MaxURIBytes = 64 << 10

// WithURILimit answers 414 URI Too Long to requests whose target is longer
// than MaxURIBytes, on HTTP/1.1 and HTTP/2 alike.
func WithURILimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := len(r.RequestURI); n > MaxURIBytes {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestURITooLong)
			json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Code: http.StatusRequestURITooLong, Reason: metav1.StatusReasonBadRequest,
				Message: fmt.Sprintf("the request's path and query are %d bytes long, more than the server's limit of %d; split the request", n, MaxURIBytes)})
			return
		}
		next.ServeHTTP(w, r)
	})
}
