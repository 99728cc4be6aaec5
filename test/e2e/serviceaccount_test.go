package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestServiceAccountTokenIsBoundToItsCluster mints a token in one cluster and
// replays it in another cluster that has a service account of the same name.
func TestServiceAccountTokenIsBoundToItsCluster(t *testing.T) {
	s := framework.StartServer(t, "")
	ctx := context.Background()
	a, b := "root:sa-a", "root:sa-b"
	s.CreateWorkspaces(a, b)
	for _, c := range []string{a, b} {
		s.Kubectl(c, "create", "namespace", "apps")
		s.Kubectl(c, "-n", "apps", "create", "serviceaccount", "robot")
	}
	token := strings.TrimSpace(s.Kubectl(a, "-n", "apps", "create", "token", "robot"))
	if token == "" {
		t.Fatal("no token")
	}
	review := func(cluster string) *authenticationv1.TokenReview {
		r, err := s.Client(cluster).AuthenticationV1().TokenReviews().Create(ctx,
			&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := review(a); !r.Status.Authenticated || r.Status.User.Username != "system:serviceaccount:apps:robot" {
		t.Errorf("token review in the issuing cluster: %+v", r.Status)
	}
	if r := review(b); r.Status.Authenticated {
		t.Errorf("token minted in %s authenticated in %s: %+v", a, b, r.Status)
	}
	if r := review("root"); r.Status.Authenticated {
		t.Errorf("token minted in %s authenticated in root: %+v", a, r.Status)
	}
	// Presented as a bearer token, it authenticates only where it was issued.
	bearer := func(cluster string) int { return bearerStatus(t, s, token, cluster, "serviceaccounts") }
	if code := bearer(b); code != http.StatusUnauthorized {
		t.Errorf("bearer token of %s in %s: %d, want 401", a, b, code)
	}
	if code := bearer(a); code != http.StatusForbidden {
		t.Errorf("bearer token of %s in %s: %d, want 403 (authenticated, not authorized)", a, a, code)
	}
}

// TestServiceAccountTokenNamesItsCluster: tokens of two clusters for the same
// namespace/name differ in their kcp.io/cluster claim, so a verifier outside
// kcp can tell them apart, and the discovery document points at keys kcp
// actually serves.
func TestServiceAccountTokenNamesItsCluster(t *testing.T) {
	s := framework.StartServer(t, "")
	a, b := "root:claim-a", "root:claim-b"
	s.CreateWorkspaces(a, b)
	claims := map[string]map[string]any{}
	for _, c := range []string{a, b} {
		s.Kubectl(c, "create", "serviceaccount", "bot")
		token := strings.TrimSpace(s.Kubectl(c, "create", "token", "bot"))
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			t.Fatalf("token of %s is not a JWT: %q", c, token)
		}
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatal(err)
		}
		claims[c] = m
	}
	for _, c := range []string{a, b} {
		if got := claims[c]["kcp.io/cluster"]; got != c {
			t.Errorf("token issued in %s carries kcp.io/cluster=%v", c, got)
		}
		if claims[c]["sub"] != "system:serviceaccount:default:bot" {
			t.Errorf("token issued in %s: sub %v", c, claims[c]["sub"])
		}
	}
	// Discovery: the key set is where the document says.
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	raw := s.Kubectl("root", "get", "--raw", "/.well-known/openid-configuration")
	if err := json.Unmarshal([]byte(raw), &doc); err != nil {
		t.Fatalf("discovery document: %v\n%s", err, raw)
	}
	if doc.JWKSURI != s.URL()+"/openid/v1/jwks" {
		t.Errorf("discovery names keys at %q, want %q (where kcp serves them)", doc.JWKSURI, s.URL()+"/openid/v1/jwks")
	}
	if keys := s.Kubectl("root", "get", "--raw", "/openid/v1/jwks"); !strings.Contains(keys, `"keys"`) {
		t.Errorf("key set: %s", keys)
	}
}

// TestServiceAccountTokenCache: token checks are cached per logical
// cluster (issue 17), and the cache never outlives what it caches: a token
// used many times stops working promptly when its service account is
// deleted, stays refused when an account of the same name is created
// again, and a same-named account of another cluster never answers for it.
func TestServiceAccountTokenCache(t *testing.T) {
	s := framework.StartServer(t, "")
	a, b := "root:sacache-a", "root:sacache-b"
	s.CreateWorkspaces(a, b)
	for _, c := range []string{a, b} {
		s.Kubectl(c, "create", "namespace", "apps")
		s.Kubectl(c, "-n", "apps", "create", "serviceaccount", "robot")
	}
	token := strings.TrimSpace(s.Kubectl(a, "-n", "apps", "create", "token", "robot"))
	bearer := func(cluster string) int { return bearerStatus(t, s, token, cluster, "configmaps") }
	s.Kubectl(a, "-n", "apps", "create", "rolebinding", "robot-view", "--clusterrole=view", "--serviceaccount=apps:robot")
	framework.Eventually(t, 10*time.Second, "the token authorized in A", func() (bool, string) {
		code := bearer(a)
		return code == http.StatusOK, fmt.Sprint(code)
	})
	hitsBefore := cacheHits(t, s)
	for i := 0; i < 20; i++ {
		if code := bearer(a); code != http.StatusOK {
			t.Fatalf("request %d with the token in A: %d", i, code)
		}
		if code := bearer(b); code != http.StatusUnauthorized {
			t.Fatalf("request %d with A's token in B: %d, want 401", i, code)
		}
	}
	// Nearly all of A's 20 checks were answered without a GET (B's fail
	// before: the token's UID does not match B's account, or B's account
	// is read and cached once).
	if hits := cacheHits(t, s) - hitsBefore; hits < 18 {
		t.Errorf("%d of 40 token checks answered from the cache, want at least 18", hits)
	}
	s.Kubectl(a, "-n", "apps", "delete", "serviceaccount", "robot")
	framework.Eventually(t, 10*time.Second, "the token refused once its service account is gone", func() (bool, string) {
		code := bearer(a)
		return code == http.StatusUnauthorized, fmt.Sprint(code)
	})
	s.Kubectl(a, "-n", "apps", "create", "serviceaccount", "robot")
	for i := 0; i < 5; i++ {
		if code := bearer(a); code != http.StatusUnauthorized {
			t.Fatalf("the old token with a new account of the same name: %d, want 401", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cacheHits reads kcp_serviceaccount_token_cache_lookups_total{result="hit"}
// from /metrics.
func cacheHits(t *testing.T, s *framework.Server) int {
	t.Helper()
	return int(metricValue(t, s, `kcp_serviceaccount_token_cache_lookups_total{result="hit"}`))
}

// bearerStatus lists resource in namespace apps of cluster with token and
// returns the status code.
func bearerStatus(t *testing.T, s *framework.Server, token, cluster, resource string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL()+"/clusters/"+cluster+"/api/v1/namespaces/apps/"+resource, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := insecureClient(t, s).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRequestsWithoutAPathGoToTheTokensWorkspace: a pod's in-cluster client
// sends no /clusters/ path; with one of kcp's service-account tokens its
// requests reach the workspace the token was issued in, and nothing else:
// a token whose claim was rewritten to name another workspace (or root) is
// refused, as is the token itself named at another workspace's path, and
// server-wide paths stay the server's.
func TestRequestsWithoutAPathGoToTheTokensWorkspace(t *testing.T) {
	s := framework.StartServer(t, "")
	a, b := "root:pod-a", "root:pod-b"
	s.CreateWorkspaces(a, b)
	for _, c := range []string{a, b} {
		s.Kubectl(c, "create", "namespace", "apps")
		s.Kubectl(c, "-n", "apps", "create", "serviceaccount", "robot")
		s.Kubectl(c, "-n", "apps", "create", "configmap", "only-in-"+strings.TrimPrefix(c, "root:"))
	}
	s.Kubectl(a, "-n", "apps", "create", "role", "read", "--verb=get,list", "--resource=configmaps")
	s.Kubectl(a, "-n", "apps", "create", "rolebinding", "read", "--role=read", "--serviceaccount=apps:robot")
	token := strings.TrimSpace(s.Kubectl(a, "-n", "apps", "create", "token", "robot"))
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", s.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := insecureClient(t, s).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			body.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, body.String()
	}
	if code, body := get("/api/v1/namespaces/apps/configmaps", token); code != 200 || !strings.Contains(body, "only-in-pod-a") || strings.Contains(body, "only-in-pod-b") {
		t.Errorf("no path: %d, want 200 with %s's ConfigMaps only:\n%.300s", code, a, body)
	}
	// The same claim rewritten: the signature no longer matches.
	parts := strings.Split(token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	for _, target := range []string{b, "root"} {
		forged := strings.Replace(string(payload), `"kcp.io/cluster":"`+a+`"`, `"kcp.io/cluster":"`+target+`"`, 1)
		if forged == string(payload) {
			t.Fatalf("the token carries no kcp.io/cluster claim: %s", payload)
		}
		tok := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]
		if code, _ := get("/api/v1/namespaces/apps/configmaps", tok); code != http.StatusUnauthorized {
			t.Errorf("a claim rewritten to %s: %d, want 401", target, code)
		}
	}
	if code, _ := get("/clusters/"+b+"/api/v1/namespaces/apps/configmaps", token); code != http.StatusUnauthorized {
		t.Errorf("the token at %s's path: %d, want 401", b, code)
	}
	// Server-wide endpoints are not a workspace's: the claim does not
	// route them, so the token is checked in root, where it is not valid.
	if code, _ := get("/metrics", token); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a tenant's token: %d, want 401", code)
	}
}
