package clusterrbac

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

type rolesByCluster map[logicalcluster.Name]map[string]*rbacv1.ClusterRole

func (r rolesByCluster) GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error) {
	if cr, ok := r[clusterOf(ctx)][name]; ok {
		return cr, nil
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("clusterroles"), name)
}

func TestSharedClusterRoles(t *testing.T) {
	shared := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "admin", Labels: map[string]string{bootstrapLabel: "rbac-defaults"}}}
	private := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "root-only"}}
	own := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "admin", Labels: map[string]string{"own": "yes"}}}
	s := SharedClusterRoles{Own: rolesByCluster{
		logicalcluster.Root: {"admin": shared, "root-only": private},
		"root:b":            {"admin": own},
	}}
	in := func(c logicalcluster.Name) context.Context {
		return logicalcluster.WithCluster(context.Background(), c)
	}
	if cr, err := s.GetClusterRole(in("root:a"), "admin"); err != nil || cr != shared {
		t.Errorf("shared admin in root:a: %v %v", cr, err)
	}
	if _, err := s.GetClusterRole(in("root:a"), "root-only"); !apierrors.IsNotFound(err) {
		t.Errorf("root's own ClusterRole seen in root:a: %v", err)
	}
	if cr, err := s.GetClusterRole(in("root:b"), "admin"); err != nil || cr != own {
		t.Errorf("root:b's own admin: %v %v", cr, err)
	}
	if _, err := s.GetClusterRole(in("root"), "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("missing in root: %v", err)
	}
}
