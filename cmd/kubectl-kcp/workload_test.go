package main

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/kcpsql/kcp/schema/workload"
)

// TestSyncerManifestGrantsEverySyncedResource: the syncer's ClusterRole on
// the physical cluster follows workload.SyncedResources, and binds no
// ClusterRole but the ones a synced RoleBinding may reference.
func TestSyncerManifestGrantsEverySyncedResource(t *testing.T) {
	raw, err := syncerManifest("pc1", "img", []byte("kubeconfig"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.ClusterRole
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		if strings.Contains("\n"+doc, "\nkind: ClusterRole\n") {
			role = &rbacv1.ClusterRole{}
			if err := yaml.Unmarshal([]byte(doc), role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role == nil {
		t.Fatalf("no ClusterRole in\n%s", raw)
	}
	grants := func(group, resource, verb, name string) bool {
		for _, r := range role.Rules {
			if has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb) && (len(r.ResourceNames) == 0 || has(r.ResourceNames, name)) {
				return true
			}
		}
		return false
	}
	for _, r := range workload.SyncedResources {
		for _, verb := range []string{"list", "watch", "patch", "delete"} {
			if !grants(r.Group, r.Resource, verb, "") {
				t.Errorf("the syncer may not %s %s", verb, r.GroupResource())
			}
		}
	}
	for _, r := range workload.ProjectedResources {
		for _, verb := range []string{"get", "list", "watch"} {
			if !grants(r.Group, r.Resource, verb, "") {
				t.Errorf("the syncer may not %s %s (projection)", verb, r.GroupResource())
			}
		}
	}
	if !grants("", "pods", "delete", "") {
		t.Error("the syncer may not delete the pods a workspace deletes")
	}
	if !grants("rbac.authorization.k8s.io", "clusterroles", "bind", "view") || grants("rbac.authorization.k8s.io", "clusterroles", "bind", "cluster-admin") ||
		grants("rbac.authorization.k8s.io", "clusterroles", "escalate", "view") || grants("rbac.authorization.k8s.io", "clusterrolebindings", "create", "") {
		t.Errorf("cluster-scoped RBAC: %+v", role.Rules)
	}
	// Pod streams kcp forwards through the tunnel.
	if !grants("", "pods/log", "get", "") || !grants("", "pods/exec", "create", "") || !grants("", "pods/attach", "create", "") || !grants("", "pods/portforward", "create", "") {
		t.Errorf("the syncer may not forward pod streams: %+v", role.Rules)
	}
	if !grants("metrics.k8s.io", "pods", "list", "") || !grants("metrics.k8s.io", "pods", "get", "") || grants("metrics.k8s.io", "nodes", "list", "") {
		t.Errorf("pod metrics (and no node metrics): %+v", role.Rules)
	}
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestTaintArgs(t *testing.T) {
	for _, bad := range []string{"gpu", "gpu=a:Sometimes", ":NoSchedule", "=x:NoSchedule", "-", "gpu:Never-", "a=b-"} {
		if _, err := parseTaintArg(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	var changes []taintChange
	for _, arg := range []string{"gpu=a100:NoSchedule", "maintenance:NoExecute", "old-"} {
		c, err := parseTaintArg(arg)
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, c)
	}
	start := []workload.Taint{{Key: "old", Effect: "NoSchedule"}, {Key: "old", Effect: "NoExecute"}, {Key: "gpu", Value: "t4", Effect: "NoSchedule"}}
	got, err := applyTaintChanges(start, changes)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != "gpu" || got[0].Value != "a100" || got[1].Key != "maintenance" || got[1].Effect != "NoExecute" {
		t.Errorf("changes: %+v", got)
	}
	if _, err := applyTaintChanges(got, []taintChange{{taint: workload.Taint{Key: "nope"}, remove: true}}); err == nil {
		t.Error("removing a missing taint succeeded")
	}
}
