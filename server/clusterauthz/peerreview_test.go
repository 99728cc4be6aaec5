package clusterauthz

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestPeerReview: a check another shard asks for (its SubjectAccessReview
// of the verb bind or content on an APIExport, for a user of a workspace
// there) needs only the provider workspace's RBAC, as kcp's own check
// does; any other check, or one asked by someone who is not a shard, still
// needs access to the workspace.
func TestPeerReview(t *testing.T) {
	peer := &user.DefaultInfo{Name: shards.PeerUser("shard-1"), Groups: []string{user.SystemPrivilegedGroup, shards.PeersGroup}}
	tenant := &user.DefaultInfo{Name: "tenant", Groups: []string{user.AllAuthenticated}}
	mallory := &user.DefaultInfo{Name: "mallory", Groups: []string{user.AllAuthenticated}}
	export := func(verb string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: mallory, Verb: verb, APIGroup: apis.Group, APIVersion: apis.Version, Resource: "apiexports", Name: "databases", ResourceRequest: true}
	}
	for _, c := range []struct {
		name     string
		asker    user.Info
		attr     authorizer.AttributesRecord
		wantRBAC bool
	}{
		{"a shard asks about bind", peer, export(apis.VerbBind), true},
		{"a shard asks about content", peer, export(apis.VerbContent), true},
		{"a shard asks about get", peer, export("get"), false},
		{"a shard asks about secrets", peer, authorizer.AttributesRecord{User: mallory, Verb: "get", Resource: "secrets", ResourceRequest: true}, false},
		{"a tenant asks about bind", tenant, export(apis.VerbBind), false},
		{"nobody asks (no requester)", nil, export(apis.VerbBind), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			asked := false
			a := Authorizer{
				Delegate: fixed{d: authorizer.DecisionNoOpinion},
				Clusters: fixed{d: authorizer.DecisionNoOpinion, asked: &asked},
				State:    func(logicalcluster.Name) (bool, bool) { return true, false },
				Owner:    func(logicalcluster.Name) string { return "" },
			}
			ctx := logicalcluster.WithCluster(context.Background(), "root:provider")
			if c.asker != nil {
				ctx = genericapirequest.WithUser(ctx, c.asker)
			}
			got, reason, _ := a.Authorize(ctx, c.attr)
			if asked != c.wantRBAC {
				t.Errorf("the provider's RBAC asked = %v, want %v (decision %v: %s)", asked, c.wantRBAC, got, reason)
			}
			if !c.wantRBAC && got != authorizer.DecisionDeny {
				t.Errorf("decision = %v, want Deny (no access to root:provider)", got)
			}
		})
	}
}

// TestParentAccessSeesForeignServiceAccounts: the parent's shard is asked
// about a service account of another cluster under its foreign name, never
// under the plain name that the parent's RBAC would read as its own
// service account's.
func TestParentAccessSeesForeignServiceAccounts(t *testing.T) {
	robot := saUser{Info: &user.DefaultInfo{Name: "system:serviceaccount:default:robot", Groups: []string{"system:serviceaccounts"}}, cluster: "root:elsewhere"}
	var asked user.Info
	a := Authorizer{
		Delegate: fixed{d: authorizer.DecisionNoOpinion},
		Clusters: fixed{d: authorizer.DecisionNoOpinion},
		State:    func(logicalcluster.Name) (bool, bool) { return true, false },
		Owner:    func(logicalcluster.Name) string { return "" },
		ParentAccess: func(_ context.Context, _ logicalcluster.Name, u user.Info) (bool, bool) {
			asked = u
			return false, true
		},
	}
	ctx := logicalcluster.WithCluster(context.Background(), "root:p:child")
	_, _, _ = a.Authorize(ctx, authorizer.AttributesRecord{User: robot, Verb: "get", Resource: "configmaps", ResourceRequest: true})
	if asked == nil || asked.GetName() != ForeignServiceAccount("root:elsewhere", "default", "robot") || len(asked.GetGroups()) != 1 {
		t.Fatalf("the parent's shard was asked about %v; want the foreign name in system:authenticated only", asked)
	}
}
