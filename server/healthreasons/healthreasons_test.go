package healthreasons

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

type mastersOnly struct{}

func (mastersOnly) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	for _, g := range a.GetUser().GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// upstream answers as upstream's healthz handlers do: the list withholds
// reasons, the check's own path gives it.
var upstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/readyz":
		http.Error(w, "[+]ping ok\n[-]datastore-writes failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
	case "/readyz/datastore-writes":
		http.Error(w, "internal server error: writes have failed: disk full", http.StatusInternalServerError)
	default:
		fmt.Fprint(w, "ok")
	}
})

func TestWithReasons(t *testing.T) {
	h := WithReasons(upstream, mastersOnly{})
	get := func(u user.Info, url string) (int, string) {
		r := httptest.NewRequest("GET", url, nil)
		r = r.WithContext(request.WithUser(r.Context(), u))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	tenant := &user.DefaultInfo{Name: "tenant", Groups: []string{user.AllAuthenticated}}
	if code, body := get(admin, "/readyz?verbose"); code != http.StatusInternalServerError || !strings.Contains(body, "[-]datastore-writes failed: writes have failed: disk full\n") || !strings.Contains(body, "[+]ping ok") {
		t.Errorf("admin: %d %q", code, body)
	}
	if code, body := get(tenant, "/readyz?verbose"); code != http.StatusInternalServerError || !strings.Contains(body, "reason withheld") || strings.Contains(body, "disk full") {
		t.Errorf("tenant: %d %q", code, body)
	}
	if _, body := get(admin, "/readyz"); !strings.Contains(body, "reason withheld") {
		t.Errorf("without verbose the answer is upstream's: %q", body)
	}
}
