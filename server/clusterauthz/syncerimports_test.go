package clusterauthz

import (
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
)

func TestSyncerImportDenied(t *testing.T) {
	pc1 := &user.DefaultInfo{Name: workload.SyncerUserPrefix + "pc1"}
	other := &user.DefaultInfo{Name: "system:serviceaccount:default:ci"}
	for _, c := range []struct {
		u          user.Info
		verb, name string
		group      string
		deny       bool
	}{
		{pc1, "get", "pc1.widgets.example.com", apiresource.Group, false},
		{pc1, "update", "pc1.widgets.example.com", apiresource.Group, false},
		{pc1, "create", "", apiresource.Group, false}, // admission checks the name
		{pc1, "get", "pc2.widgets.example.com", apiresource.Group, true},
		{pc1, "get", "pc10.widgets.example.com", apiresource.Group, true},
		{pc1, "update", "pc2.widgets.example.com", apiresource.Group, true},
		{pc1, "delete", "pc2.widgets.example.com", apiresource.Group, true},
		{pc1, "list", "", apiresource.Group, true},
		{pc1, "watch", "", apiresource.Group, true},
		{pc1, "get", "pc2.widgets.example.com", "other.example.com", false}, // not kcp's group
		{other, "get", "pc2.widgets.example.com", apiresource.Group, false},
		{other, "list", "", apiresource.Group, false},
	} {
		attr := authorizer.AttributesRecord{User: c.u, Verb: c.verb, APIGroup: c.group, Resource: "apiresourceimports", Name: c.name, ResourceRequest: true}
		if _, deny := syncerImportDenied(attr); deny != c.deny {
			t.Errorf("%s %s %s (%s): deny %v, want %v", c.u.GetName(), c.verb, c.name, c.group, deny, c.deny)
		}
	}
}
