package clusterrbac

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	rbacregistryvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// SharedClusterRoles answers like Own in the request's cluster and, outside
// root, falls back to root's bootstrap ClusterRole of the name: the same
// sharing rule the authorizer follows, for readers that go to storage (the
// RBAC escalation check), so that what a role grants and what may be put
// into a role agree.
type SharedClusterRoles struct {
	Own rbacregistryvalidation.ClusterRoleGetter
}

func (s SharedClusterRoles) GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error) {
	cr, err := s.Own.GetClusterRole(ctx, name)
	if err == nil || !apierrors.IsNotFound(err) || clusterOf(ctx) == logicalcluster.Root {
		return cr, err
	}
	if shared, rerr := s.Own.GetClusterRole(logicalcluster.WithCluster(ctx, logicalcluster.Root), name); rerr == nil && shared.Labels[bootstrapLabel] == "rbac-defaults" {
		return shared, nil
	}
	return nil, err
}

// SharedClusterRoleBindings lists the request's cluster's own bindings plus,
// outside root, root's bootstrap bindings for every (un)authenticated user.
type SharedClusterRoleBindings struct {
	Own rbacregistryvalidation.ClusterRoleBindingLister
}

func (s SharedClusterRoleBindings) ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	own, err := s.Own.ListClusterRoleBindings(ctx)
	if err != nil || clusterOf(ctx) == logicalcluster.Root {
		return own, err
	}
	root, err := s.Own.ListClusterRoleBindings(logicalcluster.WithCluster(ctx, logicalcluster.Root))
	for _, b := range root {
		if b.Labels[bootstrapLabel] == "rbac-defaults" && forEveryone(b.Subjects) {
			own = append(own, b)
		}
	}
	return own, err
}
