package serverwide

import "testing"

func TestIsServerWide(t *testing.T) {
	for path, want := range map[string]bool{
		"/metrics": true, "/debug/pprof/": true, "/debug/flags/v": true, "/statusz": true, "/flagz": true,
		"/debug/api_priority_and_fairness/dump_requests": true, "/healthz": true, "/readyz/etcd": true, "/": true,
		"/apix": true, "/versionz": true, "/metrics/slis": true,
		"/api": false, "/api/v1": false, "/apis": false, "/apis/apps/v1": false, "/openapi/v2": false,
		"/openapi/v3/apis/apps/v1": false, "/version": false, "/.well-known/openid-configuration": false, "/openid/v1/jwks": false,
	} {
		if got := IsServerWide(path); got != want {
			t.Errorf("IsServerWide(%q) = %v, want %v", path, got, want)
		}
	}
}
