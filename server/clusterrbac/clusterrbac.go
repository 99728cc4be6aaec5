// Package clusterrbac evaluates RBAC in the logical cluster of each request:
// upstream's RBAC authorizer, fed by one shared informer per RBAC resource
// across all clusters, looks up roles and bindings of the request's cluster
// only. The ClusterRoles upstream bootstraps in root (cluster-admin, admin,
// edit, view, system:*) are shared: a binding in any cluster may refer to
// them without copying them, while other ClusterRoles of root stay in root.
package clusterrbac

import (
	"context"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	rbacauthorizer "k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// bootstrapLabel marks the ClusterRoles upstream creates in root; they are
// shared with every logical cluster.
const bootstrapLabel = "kubernetes.io/bootstrapping"

// Authorizer is RBAC per logical cluster. It has no opinion until Start has
// synced its informers.
type Authorizer struct {
	rbac atomic.Pointer[rbacauthorizer.RBACAuthorizer]
}

// New returns an authorizer that is not started yet.
func New() *Authorizer { return &Authorizer{} }

type indexers struct {
	roles, roleBindings, clusterRoles, clusterRoleBindings cache.Indexer
}

// Start runs the informers on the server's loopback config and returns once
// they have synced and the authorizer answers (or ctx ends): called from a
// post-start hook, it keeps /readyz from reporting ready before RBAC does.
func (a *Authorizer) Start(ctx context.Context, loopback *rest.Config, local *localwatch.Storages) error {
	client, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return err
	}
	rc := client.RbacV1().RESTClient()
	var ix indexers
	var synced []cache.InformerSynced
	run := func(resource string, into *cache.Indexer, obj runtime.Object) {
		// The authorizer reads rules, subjects, role references and labels
		// (the bootstrap label), never managed fields.
		lw := local.FromClientAs(rc, rbacv1.SchemeGroupVersion, resource, fields.Everything(), localwatch.Trimmed(rbacv1.SchemeGroupVersion))
		var ctrl cache.Controller
		*into, ctrl = clusterinformer.New(lw, obj, clusterinformer.ClusterIndexers, nil)
		go ctrl.RunWithContext(ctx)
		synced = append(synced, ctrl.HasSynced)
	}
	run("roles", &ix.roles, &rbacv1.Role{})
	run("rolebindings", &ix.roleBindings, &rbacv1.RoleBinding{})
	run("clusterroles", &ix.clusterRoles, &rbacv1.ClusterRole{})
	run("clusterrolebindings", &ix.clusterRoleBindings, &rbacv1.ClusterRoleBinding{})
	if !clusterinformer.WaitForSync(ctx, synced...) {
		return nil
	}
	a.rbac.Store(rbacauthorizer.New(ix, ix, ix, ix))
	klog.InfoS("per-cluster RBAC is serving")
	return nil
}

func clusterOf(ctx context.Context) logicalcluster.Name {
	if c, ok := logicalcluster.From(ctx); ok {
		return c
	}
	return logicalcluster.Root
}

func (ix indexers) GetRole(ctx context.Context, namespace, name string) (*rbacv1.Role, error) {
	obj, ok, err := ix.roles.GetByKey(clusterinformer.Key(clusterOf(ctx), namespace, name))
	if err != nil || !ok {
		return nil, apierrors.NewNotFound(rbacv1.Resource("roles"), name)
	}
	return obj.(*rbacv1.Role), nil
}

func (ix indexers) ListRoleBindings(ctx context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	objs, err := ix.roleBindings.ByIndex(clusterinformer.ByClusterNamespace, string(clusterOf(ctx))+"|"+namespace)
	out := make([]*rbacv1.RoleBinding, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*rbacv1.RoleBinding))
	}
	return out, err
}

func (ix indexers) GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error) {
	cluster := clusterOf(ctx)
	if obj, ok, err := ix.clusterRoles.GetByKey(clusterinformer.Key(cluster, "", name)); err == nil && ok {
		return obj.(*rbacv1.ClusterRole), nil
	}
	if cluster != logicalcluster.Root {
		obj, ok, err := ix.clusterRoles.GetByKey(clusterinformer.Key(logicalcluster.Root, "", name))
		if err == nil && ok {
			if cr := obj.(*rbacv1.ClusterRole); cr.Labels[bootstrapLabel] == "rbac-defaults" {
				return cr, nil
			}
		}
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("clusterroles"), name)
}

// ListClusterRoleBindings returns the cluster's own bindings plus root's
// bootstrap bindings for every (un)authenticated user (discovery, self
// reviews, public info), so each cluster behaves like a fresh cluster.
func (ix indexers) ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	cluster := clusterOf(ctx)
	objs, err := ix.clusterRoleBindings.ByIndex(clusterinformer.ByCluster, string(cluster))
	if err != nil {
		return nil, err
	}
	out := make([]*rbacv1.ClusterRoleBinding, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*rbacv1.ClusterRoleBinding))
	}
	if cluster == logicalcluster.Root {
		return out, nil
	}
	shared, err := ix.clusterRoleBindings.ByIndex(clusterinformer.ByCluster, string(logicalcluster.Root))
	for _, o := range shared {
		if b := o.(*rbacv1.ClusterRoleBinding); b.Labels[bootstrapLabel] == "rbac-defaults" && forEveryone(b.Subjects) {
			out = append(out, b)
		}
	}
	return out, err
}

func forEveryone(subjects []rbacv1.Subject) bool {
	for _, s := range subjects {
		if s.Kind != rbacv1.GroupKind || (s.Name != user.AllAuthenticated && s.Name != user.AllUnauthenticated) {
			return false
		}
	}
	return len(subjects) > 0
}

// Authorize answers with the RBAC of the request's cluster.
func (a *Authorizer) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	r := a.rbac.Load()
	if r == nil {
		return authorizer.DecisionNoOpinion, "per-cluster RBAC is starting", nil
	}
	return r.Authorize(ctx, attr)
}

// ConditionsAwareAuthorize answers like Authorize.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attr authorizer.Attributes) authorizer.ConditionsAwareDecision {
	r := a.rbac.Load()
	if r == nil {
		return authorizer.ConditionsAwareDecisionNoOpinion("per-cluster RBAC is starting", nil)
	}
	return r.ConditionsAwareAuthorize(ctx, attr)
}

// RulesFor answers SelfSubjectRulesReview in the request's cluster.
func (a *Authorizer) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	r := a.rbac.Load()
	if r == nil {
		return nil, nil, true, nil
	}
	return r.RulesFor(ctx, u, namespace)
}

// EvaluateConditions is never reached: RBAC decisions are unconditional.
func (a *Authorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
