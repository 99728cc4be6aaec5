package e2e

import (
	"net/http"
	"slices"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// attempt is one row of a security table: a request as an attacker would
// send it, and the answers that mean the wall held.
type attempt struct {
	what   string
	client *http.Client
	method string
	path   string
	body   string
	codes  []int
}

func runAttempts(t *testing.T, s *framework.Server, rows []attempt) {
	t.Helper()
	for _, r := range rows {
		code, body := do(t, r.client, r.method, s.URL()+r.path, r.body)
		if !slices.Contains(r.codes, code) {
			if len(body) > 300 {
				body = body[:300] + "..."
			}
			t.Errorf("%s: %s %s = %d, want one of %v: %s", r.what, r.method, r.path, code, r.codes, body)
		}
	}
}

// TestServerWideEndpoints: the admin of a workspace (cluster-admin there,
// which includes nonResourceURLs "*") and a reader of all clusters try the
// server's own endpoints (metrics, profiling, log level, flow-control dumps)
// through their prefixes. Only root's RBAC may grant those.
func TestServerWideEndpoints(t *testing.T) {
	s := framework.StartServer(t, "")
	const ws = "root:sw-a"
	s.CreateWorkspaces(ws)
	grants := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sw-access}
rules:
- {apiGroups: ["tenancy.kcp.io"], resources: ["workspaces/content"], resourceNames: ["sw-a"], verbs: ["access"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sw-access}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sw-access}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: sw-tenant}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sw-wildcard-reader}
rules:
- {nonResourceURLs: ["/clusters/*"], verbs: ["get"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sw-wildcard-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sw-wildcard-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: sw-reader}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sw-metrics}
rules:
- {nonResourceURLs: ["/metrics"], verbs: ["get"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sw-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sw-metrics}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: sw-scraper}]
`
	if out, err := s.KubectlErr("root", grants, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s.Kubectl(ws, "create", "clusterrolebinding", "sw-tenant-admin", "--clusterrole=cluster-admin", "--user=sw-tenant")
	tenant := userClient(t, s, "sw-tenant")
	reader := userClient(t, s, "sw-reader")
	scraper := userClient(t, s, "sw-scraper")
	admin := userClient(t, s, "sw-admin", "system:masters")
	p := "/clusters/" + ws
	denied := []int{http.StatusForbidden}

	runAttempts(t, s, []attempt{
		// The tenant's own discovery keeps working: the wall is not a blanket.
		{"tenant discovery", tenant, "GET", p + "/api", "", []int{200}},
		{"tenant version", tenant, "GET", p + "/version", "", []int{200}},
		{"tenant openapi", tenant, "GET", p + "/openapi/v2", "", []int{200}},

		{"server metrics through a workspace", tenant, "GET", p + "/metrics", "", denied},
		{"server SLI metrics through a workspace", tenant, "GET", p + "/metrics/slis", "", denied},
		{"pprof index through a workspace", tenant, "GET", p + "/debug/pprof/", "", denied},
		{"heap profile through a workspace", tenant, "GET", p + "/debug/pprof/heap", "", denied},
		{"goroutine dump through a workspace", tenant, "GET", p + "/debug/pprof/goroutine?debug=2", "", denied},
		{"server log level through a workspace", tenant, "PUT", p + "/debug/flags/v", "9", denied},
		{"statusz through a workspace", tenant, "GET", p + "/statusz", "", []int{403, 404}},
		{"flagz through a workspace", tenant, "GET", p + "/flagz", "", []int{403, 404}},
		{"other tenants' requests through a workspace", tenant, "GET", p + "/debug/api_priority_and_fairness/dump_requests?includeRequestDetails=1", "", denied},
		{"flow-control priority levels through a workspace", tenant, "GET", p + "/debug/api_priority_and_fairness/dump_priority_levels", "", denied},
		{"server paths through a workspace", tenant, "GET", p + "/", "", denied},
		{"metrics through a nested prefix", tenant, "GET", p + "/clusters/" + ws + "/metrics", "", []int{403, 404}},

		{"metrics of all clusters", reader, "GET", "/clusters/*/metrics", "", denied},
		{"pprof of all clusters", reader, "GET", "/clusters/*/debug/pprof/", "", denied},
		{"flow-control dump of all clusters", reader, "GET", "/clusters/*/debug/api_priority_and_fairness/dump_requests?includeRequestDetails=1", "", denied},
		{"log level of all clusters", reader, "PUT", "/clusters/*/debug/flags/v", "9", []int{403, 405}},

		// Root's RBAC decides wherever the URL is reached.
		{"root-granted scraper through a workspace", scraper, "GET", p + "/metrics", "", []int{200}},
		{"root-granted scraper in root", scraper, "GET", "/metrics", "", []int{200}},
		{"system:masters through a workspace", admin, "GET", p + "/debug/pprof/", "", []int{200}},
	})
}
