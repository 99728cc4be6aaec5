package e2e

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestDefaultRolesAtRestart checks that every start puts Kubernetes'
// default RBAC policy back in place, as upstream's API server does, on
// both datastores: a deleted default ClusterRole, ClusterRoleBinding, Role
// and RoleBinding come back, a rule taken from a default role is added
// back, and a default role its operator marked
// rbac.authorization.kubernetes.io/autoupdate=false stays as they left it.
func TestDefaultRolesAtRestart(t *testing.T) {
	for _, d := range []framework.Dialect{framework.SQLite, framework.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d))
			ctx := context.Background()
			rbac := s.Client("root").RbacV1()

			// A new database has them all.
			present := func(when string) {
				t.Helper()
				if _, err := rbac.ClusterRoles().Get(ctx, "system:heapster", metav1.GetOptions{}); err != nil {
					t.Errorf("%s: clusterrole system:heapster: %v", when, err)
				}
				if _, err := rbac.ClusterRoleBindings().Get(ctx, "system:kube-dns", metav1.GetOptions{}); err != nil {
					t.Errorf("%s: clusterrolebinding system:kube-dns: %v", when, err)
				}
				if _, err := rbac.Roles("kube-system").Get(ctx, "extension-apiserver-authentication-reader", metav1.GetOptions{}); err != nil {
					t.Errorf("%s: role kube-system/extension-apiserver-authentication-reader: %v", when, err)
				}
				if _, err := rbac.RoleBindings("kube-system").Get(ctx, "system::extension-apiserver-authentication-reader", metav1.GetOptions{}); err != nil {
					t.Errorf("%s: rolebinding kube-system/system::extension-apiserver-authentication-reader: %v", when, err)
				}
			}
			present("a new database")
			if t.Failed() {
				t.FailNow()
			}

			// Deleted.
			check(t, rbac.ClusterRoles().Delete(ctx, "system:heapster", metav1.DeleteOptions{}))
			check(t, rbac.ClusterRoleBindings().Delete(ctx, "system:kube-dns", metav1.DeleteOptions{}))
			check(t, rbac.Roles("kube-system").Delete(ctx, "extension-apiserver-authentication-reader", metav1.DeleteOptions{}))
			check(t, rbac.RoleBindings("kube-system").Delete(ctx, "system::extension-apiserver-authentication-reader", metav1.DeleteOptions{}))
			// A rule taken away.
			proxier, err := rbac.ClusterRoles().Get(ctx, "system:node-proxier", metav1.GetOptions{})
			check(t, err)
			if len(proxier.Rules) < 2 {
				t.Fatalf("system:node-proxier has %d rules; the test takes one away", len(proxier.Rules))
			}
			removed := proxier.Rules[0]
			proxier.Rules = proxier.Rules[1:]
			_, err = rbac.ClusterRoles().Update(ctx, proxier, metav1.UpdateOptions{})
			check(t, err)
			// Protected by its operator, and emptied.
			aggregator, err := rbac.ClusterRoles().Get(ctx, "system:kube-aggregator", metav1.GetOptions{})
			check(t, err)
			aggregator.Annotations["rbac.authorization.kubernetes.io/autoupdate"] = "false"
			aggregator.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}
			_, err = rbac.ClusterRoles().Update(ctx, aggregator, metav1.UpdateOptions{})
			check(t, err)
			// Still gone while the server runs: only a start reconciles.
			if _, err := rbac.ClusterRoles().Get(ctx, "system:heapster", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("system:heapster right after its delete: %v", err)
			}

			s.Stop()
			s.Start()
			present("after a restart")
			proxier, err = rbac.ClusterRoles().Get(ctx, "system:node-proxier", metav1.GetOptions{})
			check(t, err)
			// Reconciling adds what is missing (in its own shape: a rule per
			// verb and resource), so the rule taken away must be covered.
			for _, g := range removed.APIGroups {
				for _, r := range removed.Resources {
					for _, v := range removed.Verbs {
						if !grants(proxier.Rules, g, r, v) {
							t.Errorf("system:node-proxier after a restart does not grant %s %q %s again: %v", v, g, r, proxier.Rules)
						}
					}
				}
			}
			aggregator, err = rbac.ClusterRoles().Get(ctx, "system:kube-aggregator", metav1.GetOptions{})
			check(t, err)
			if len(aggregator.Rules) != 1 || aggregator.Rules[0].Resources[0] != "configmaps" {
				t.Errorf("the protected system:kube-aggregator was changed at the restart: %v", aggregator.Rules)
			}
		})
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	has := func(list []string, v string) bool {
		for _, x := range list {
			if x == v || x == "*" {
				return true
			}
		}
		return false
	}
	for _, r := range rules {
		if has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// TestDefaultFlowControlAtRestart checks kcp's hook for upstream's
// priority-and-fairness-config-producer: a new database has the suggested
// and mandatory FlowSchemas and PriorityLevelConfigurations, and a start
// puts back a deleted one of either kind, while a suggested one its operator marked
// apf.kubernetes.io/autoupdate-spec=false keeps the operator's spec.
func TestDefaultFlowControlAtRestart(t *testing.T) {
	s := framework.StartServer(t, framework.DatastoreFor(t, framework.SQLite))
	ctx := context.Background()
	fc := s.Client("root").FlowcontrolV1()
	for _, name := range []string{"exempt", "system-leader-election", "global-default", "catch-all", "service-accounts"} {
		if _, err := fc.FlowSchemas().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("a new database: flowschema %s: %v", name, err)
		}
	}
	for _, name := range []string{"exempt", "catch-all", "workload-low", "global-default"} {
		if _, err := fc.PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("a new database: prioritylevelconfiguration %s: %v", name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Deleted: a suggested flow schema and a mandatory priority level.
	check(t, fc.FlowSchemas().Delete(ctx, "service-accounts", metav1.DeleteOptions{}))
	check(t, fc.PriorityLevelConfigurations().Delete(ctx, "catch-all", metav1.DeleteOptions{}))
	// A mandatory flow schema deleted (its spec is fixed by validation).
	check(t, fc.FlowSchemas().Delete(ctx, "catch-all", metav1.DeleteOptions{}))
	// A suggested priority level its operator owns.
	low, err := fc.PriorityLevelConfigurations().Get(ctx, "workload-low", metav1.GetOptions{})
	check(t, err)
	if low.Spec.Limited == nil || low.Spec.Limited.NominalConcurrencyShares == nil {
		t.Fatalf("workload-low has no nominal concurrency shares: %+v", low.Spec)
	}
	if low.Annotations == nil {
		low.Annotations = map[string]string{}
	}
	low.Annotations["apf.kubernetes.io/autoupdate-spec"] = "false"
	operators := *low.Spec.Limited.NominalConcurrencyShares + 3
	low.Spec.Limited.NominalConcurrencyShares = &operators
	_, err = fc.PriorityLevelConfigurations().Update(ctx, low, metav1.UpdateOptions{})
	check(t, err)

	s.Stop()
	s.Start()
	if _, err := fc.FlowSchemas().Get(ctx, "service-accounts", metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted suggested flowschema service-accounts after a restart: %v", err)
	}
	if _, err := fc.PriorityLevelConfigurations().Get(ctx, "catch-all", metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted mandatory prioritylevelconfiguration catch-all after a restart: %v", err)
	}
	if _, err := fc.FlowSchemas().Get(ctx, "catch-all", metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted mandatory flowschema catch-all after a restart: %v", err)
	}
	low, err = fc.PriorityLevelConfigurations().Get(ctx, "workload-low", metav1.GetOptions{})
	check(t, err)
	if got := *low.Spec.Limited.NominalConcurrencyShares; got != operators {
		t.Errorf("workload-low, marked autoupdate-spec=false, has nominalConcurrencyShares %d after a restart, want the operator's %d", got, operators)
	}
}
