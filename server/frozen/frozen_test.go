package frozen

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func info(verb, group, resource, sub string) *request.RequestInfo {
	return &request.RequestInfo{IsResourceRequest: true, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: sub, Name: "x"}
}

// Which requests a frozen workspace refuses, and whom it lets write.
func TestRefused(t *testing.T) {
	tenant := &user.DefaultInfo{Name: "team-admin", Groups: []string{user.AllAuthenticated}}
	masters := &user.DefaultInfo{Name: "ops", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	loopback := &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
	// A tenant who calls itself system:apiserver's group is still a tenant.
	posing := &user.DefaultInfo{Name: "system:apiserver-not", Groups: []string{user.SystemPrivilegedGroup}}
	cases := []struct {
		name    string
		info    *request.RequestInfo
		u       user.Info
		syncer  bool
		refused bool
	}{
		{"get", info("get", "", "configmaps", ""), tenant, false, false},
		{"list", info("list", "", "configmaps", ""), tenant, false, false},
		{"watch", info("watch", "", "configmaps", ""), tenant, false, false},
		{"discovery", &request.RequestInfo{Verb: "get", Path: "/apis"}, tenant, false, false},
		{"create", info("create", "", "configmaps", ""), tenant, false, true},
		{"update", info("update", "", "configmaps", ""), tenant, false, true},
		{"patch", info("patch", "", "configmaps", ""), tenant, false, true},
		{"delete", info("delete", "", "configmaps", ""), tenant, false, true},
		{"deletecollection", info("deletecollection", "", "configmaps", ""), tenant, false, true},
		{"custom resource", info("create", "example.com", "widgets", ""), tenant, false, true},
		{"status of a custom resource", info("update", "example.com", "widgets", "status"), tenant, false, true},
		{"scale", info("patch", "apps", "deployments", "scale"), tenant, false, true},
		{"namespace", info("create", "", "namespaces", ""), tenant, false, true},
		{"workspace of a child", info("create", "tenancy.kcp.io", "workspaces", ""), tenant, false, true},
		{"its LogicalCluster", info("update", "tenancy.kcp.io", "logicalclusters", ""), tenant, false, true},
		{"system:masters", info("create", "", "configmaps", ""), masters, false, true},
		{"system:masters deletes", info("delete", "", "namespaces", ""), masters, false, true},
		{"a look-alike name", info("create", "", "configmaps", ""), posing, false, true},
		{"no user", info("create", "", "configmaps", ""), nil, false, true},
		{"kcp's loopback", info("delete", "", "configmaps", ""), loopback, false, false},
		{"kcp's loopback on the LogicalCluster", info("update", "tenancy.kcp.io", "logicalclusters", ""), loopback, false, false},
		{"kcp's loopback finalizes", info("update", "", "namespaces", "finalize"), loopback, false, false},
		{"self subject access review", info("create", "authorization.k8s.io", "selfsubjectaccessreviews", ""), tenant, false, false},
		{"self subject rules review", info("create", "authorization.k8s.io", "selfsubjectrulesreviews", ""), tenant, false, false},
		{"self subject review", info("create", "authentication.k8s.io", "selfsubjectreviews", ""), tenant, false, false},
		{"subject access review", info("create", "authorization.k8s.io", "subjectaccessreviews", ""), tenant, false, false},
		{"local subject access review", info("create", "authorization.k8s.io", "localsubjectaccessreviews", ""), tenant, false, false},
		{"token review", info("create", "authentication.k8s.io", "tokenreviews", ""), tenant, false, false},
		{"service-account token", info("create", "", "serviceaccounts", "token"), tenant, false, false},
		{"service account itself", info("create", "", "serviceaccounts", ""), tenant, false, true},
		{"a review's name elsewhere", info("create", "example.com", "selfsubjectaccessreviews", ""), tenant, false, true},
		{"a token subresource of something else", info("create", "", "secrets", "token"), tenant, false, true},
		{"deleting a review", info("delete", "authorization.k8s.io", "selfsubjectaccessreviews", ""), tenant, false, true},
		{"syncer status", info("patch", "apps", "deployments", "status"), masters, true, false},
		{"syncer finalizer", info("patch", "apps", "deployments", ""), masters, true, false},
		{"syncer heartbeat", info("update", "workload.kcp.io", "synctargets", "status"), tenant, false, false},
		{"syncer heartbeat patch", info("patch", "workload.kcp.io", "synctargets", "status"), tenant, false, false},
		{"sync target itself", info("update", "workload.kcp.io", "synctargets", ""), tenant, false, true},
		{"deleting a sync target", info("delete", "workload.kcp.io", "synctargets", ""), tenant, false, true},
		{"pods/log", info("get", "", "pods", "log"), tenant, false, false},
		{"pods/eviction", info("create", "", "pods", "eviction"), tenant, false, true},
		{"pods/exec by websocket", info("get", "", "pods", "exec"), tenant, false, true},
		{"pods/exec", info("create", "", "pods", "exec"), tenant, false, true},
		{"pods/attach", info("get", "", "pods", "attach"), tenant, false, true},
		{"pods/portforward", info("get", "", "pods", "portforward"), tenant, false, true},
		{"services/proxy", info("get", "", "services", "proxy"), tenant, false, true},
	}
	for _, c := range cases {
		if got := Refused(c.info, c.u, c.syncer); got != c.refused {
			t.Errorf("%s: refused %v, want %v", c.name, got, c.refused)
		}
	}
}

func TestMessage(t *testing.T) {
	for _, c := range []struct {
		f    logicalclusters.Freeze
		want []string
	}{
		{logicalclusters.Freeze{Reason: "incident 4711"}, []string{
			"the workspace root:org:team-a is frozen (read-only): incident 4711; reads and watches still work; whoever may update Workspace team-a in root:org can unfreeze it"}},
		{logicalclusters.Freeze{Restore: "undo"}, []string{
			"the workspace root:org:team-a is frozen (read-only): being restored by WorkspaceRestore undo in root:org; reads and watches still work; it unfreezes when the restore ends"}},
		{logicalclusters.Freeze{Reason: "incident 4711", Restore: "undo"}, []string{"being restored by WorkspaceRestore undo in root:org",
			"then it stays frozen by its Workspace: incident 4711; whoever may update Workspace team-a in root:org can unfreeze it"}},
	} {
		got := Message("root:org:team-a", c.f)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("Message(%+v) = %q, lacks %q", c.f, got, w)
			}
		}
	}
}

// The filter answers a refused request itself with a Forbidden Status and
// passes everything else on: other clusters, reads, the wildcard.
func TestWithFrozen(t *testing.T) {
	passed := 0
	h := WithFrozen(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed++ }), func(c logicalcluster.Name) logicalclusters.Freeze {
		if c == "root:a" {
			return logicalclusters.Freeze{Reason: "incident 4711"}
		}
		return logicalclusters.Freeze{}
	})
	tenant := &user.DefaultInfo{Name: "t"}
	serve := func(cluster logicalcluster.Name, ri *request.RequestInfo) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", nil)
		ctx := request.WithUser(request.WithRequestInfo(req.Context(), ri), tenant)
		if cluster != "" {
			ctx = logicalcluster.WithCluster(ctx, cluster)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req.WithContext(ctx))
		return w
	}
	w := serve("root:a", info("create", "", "configmaps", ""))
	var s metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || w.Code != http.StatusForbidden || s.Reason != metav1.StatusReasonForbidden || s.Code != 403 ||
		!strings.HasPrefix(s.Message, `configmaps "x" is forbidden: the workspace root:a is frozen (read-only): incident 4711;`) {
		t.Errorf("a create in a frozen workspace: %d %s (%v)", w.Code, w.Body.String(), err)
	}
	if passed != 0 {
		t.Fatal("the refused request went on")
	}
	for _, c := range []struct {
		cluster logicalcluster.Name
		ri      *request.RequestInfo
	}{
		{"root:a", info("get", "", "configmaps", "")},
		{"root:a", info("watch", "", "configmaps", "")},
		{"root:b", info("create", "", "configmaps", "")},
		{"root", info("create", "", "configmaps", "")},
		{logicalcluster.Wildcard, info("list", "", "configmaps", "")},
		{"", info("create", "", "configmaps", "")},
	} {
		before := passed
		if w := serve(c.cluster, c.ri); passed != before+1 {
			t.Errorf("%s %s in %q was answered %d %s", c.ri.Verb, c.ri.Resource, c.cluster, w.Code, w.Body.String())
		}
	}
}
