package clusterauthz

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// fixed answers every request with one decision and records that it was asked.
type fixed struct {
	authorizer.Authorizer
	d     authorizer.Decision
	asked *bool
	allow func(authorizer.Attributes) bool
}

func (f fixed) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if f.asked != nil {
		*f.asked = true
	}
	if f.allow != nil && f.allow(a) {
		return authorizer.DecisionAllow, "", nil
	}
	return f.d, "", nil
}

type saUser struct {
	user.Info
	cluster logicalcluster.Name
}

func (u saUser) ServiceAccountCluster() logicalcluster.Name { return u.cluster }

func TestAuthorize(t *testing.T) {
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	loopback := &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	robotName := &user.DefaultInfo{Name: "system:serviceaccount:apps:robot"}
	robot := saUser{Info: robotName, cluster: "root:a:team"}
	tenantAdmin := &user.DefaultInfo{Name: "tenant-admin"}
	lead := &user.DefaultInfo{Name: "lead"}
	platform := &user.DefaultInfo{Name: "platform"}

	states := map[logicalcluster.Name][2]bool{ // exists, terminating
		"root:a":      {true, false},
		"root:a:team": {true, false},
		"root:dying":  {true, true},
	}
	owners := map[logicalcluster.Name]string{"root:a:team": "lead", "root:a": "tenant-admin"}
	// Root's RBAC grants alice access to root:a, and platform the wildcard.
	rootRBAC := func(a authorizer.Attributes) bool {
		return (a.GetUser().GetName() == "alice" && a.GetVerb() == "access" && a.GetName() == "a") ||
			(a.GetUser().GetName() == "platform" && a.GetPath() == WildcardPath)
	}
	res := func(u user.Info, verb, resource, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, Resource: resource, Name: name, ResourceRequest: true}
	}
	cases := []struct {
		name     string
		cluster  logicalcluster.Name
		attr     authorizer.AttributesRecord
		want     authorizer.Decision
		wantRBAC bool // the cluster's RBAC decided
	}{
		{"wildcard list by admin", "*", res(admin, "list", "secrets", ""), authorizer.DecisionAllow, false},
		{"wildcard create by admin", "*", res(admin, "create", "secrets", ""), authorizer.DecisionDeny, false},
		{"wildcard get by admin", "*", res(admin, "get", "secrets", "x"), authorizer.DecisionDeny, false},
		{"wildcard list by alice", "*", res(alice, "list", "secrets", ""), authorizer.DecisionDeny, false},
		{"wildcard watch by granted identity", "*", res(platform, "watch", "configmaps", ""), authorizer.DecisionAllow, false},
		{"missing cluster, admin", "root:ghost", res(admin, "list", "configmaps", ""), authorizer.DecisionDeny, false},
		{"missing cluster, loopback bootstraps", "root:ghost", res(loopback, "create", "namespaces", ""), authorizer.DecisionAllow, false},
		{"dying cluster, admin", "root:dying", res(admin, "list", "configmaps", ""), authorizer.DecisionDeny, false},
		{"dying cluster, loopback deletes", "root:dying", res(loopback, "delete", "configmaps", "x"), authorizer.DecisionAllow, false},
		{"dying cluster, loopback creates", "root:dying", res(loopback, "create", "configmaps", ""), authorizer.DecisionDeny, false},
		{"admin anywhere", "root:a", res(admin, "delete", "namespaces", "x"), authorizer.DecisionAllow, false},
		{"alice with access goes to the cluster's RBAC", "root:a", res(alice, "get", "configmaps", "x"), authorizer.DecisionNoOpinion, true},
		{"alice without access to a child (asked in the parent)", "root:a:team", res(alice, "get", "configmaps", "x"), authorizer.DecisionDeny, true},
		{"owner enters its workspace", "root:a:team", res(lead, "get", "configmaps", "x"), authorizer.DecisionNoOpinion, true},
		{"owner deletes its Workspace in the parent", "root:a", authorizer.AttributesRecord{User: lead, Verb: "delete", APIGroup: "tenancy.kcp.io", Resource: "workspaces", Name: "team", ResourceRequest: true}, authorizer.DecisionAllow, false},
		{"owner cannot write status", "root:a", authorizer.AttributesRecord{User: lead, Verb: "update", APIGroup: "tenancy.kcp.io", Resource: "workspaces", Subresource: "status", Name: "team", ResourceRequest: true}, authorizer.DecisionDeny, false},
		{"service account of the cluster", "root:a:team", res(robot, "get", "configmaps", "x"), authorizer.DecisionNoOpinion, true},
		{"service account of another cluster", "root:a", res(robot, "get", "configmaps", "x"), authorizer.DecisionDeny, false},
		{"service-account name without a token", "root:a:team", res(robotName, "get", "configmaps", "x"), authorizer.DecisionDeny, true},
		{"missing and forbidden answer alike", "root:ghost", res(alice, "get", "configmaps", "x"), authorizer.DecisionDeny, false},
		{"tenant impersonates system:masters", "root:a", authorizer.AttributesRecord{User: tenantAdmin, Verb: "impersonate", Resource: "groups", Name: user.SystemPrivilegedGroup, ResourceRequest: true}, authorizer.DecisionDeny, false},
		{"tenant impersonates the server", "root:a", authorizer.AttributesRecord{User: tenantAdmin, Verb: "impersonate:user-info", APIGroup: "authentication.k8s.io", Resource: "users", Name: user.APIServerUser, ResourceRequest: true}, authorizer.DecisionDeny, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			asked := false
			a := Authorizer{
				Delegate: fixed{d: authorizer.DecisionNoOpinion, allow: rootRBAC},
				Clusters: fixed{d: authorizer.DecisionNoOpinion, asked: &asked},
				State: func(n logicalcluster.Name) (bool, bool) {
					s := states[n]
					return s[0], s[1]
				},
				Owner: func(n logicalcluster.Name) string { return owners[n] },
			}
			got, reason, _ := a.Authorize(logicalcluster.WithCluster(context.Background(), c.cluster), c.attr)
			if got != c.want {
				t.Errorf("decision = %v (%s), want %v", got, reason, c.want)
			}
			if asked != c.wantRBAC {
				t.Errorf("cluster RBAC asked = %v, want %v", asked, c.wantRBAC)
			}
		})
	}
}
