package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWorkspaceLimitsCoverChildWorkspaces: a capped tenant cannot store
// more than its cap by creating workspaces inside its own. A workspace's
// caps bound what it and every workspace inside it store together; a
// create in a grandchild is refused once the tree is full, with a message
// naming the workspace whose cap it is, and SQL agrees that the tree holds
// no more than the cap. Another tree is not affected. Both dialects (the
// count is one SQL range over the cluster index).
func TestWorkspaceLimitsCoverChildWorkspaces(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			const limit = 60
			s := framework.StartServer(t, framework.DatastoreFor(t, d), fmt.Sprintf("--workspace-max-objects=%d", limit))
			s.CreateWorkspaces("root:tree-a:kid:grandkid", "root:tree-b")
			ctx := context.Background()
			fill := func(ws string, max int) (int, error) {
				c := s.Client(ws)
				for i := range max {
					if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%d", i)}}, metav1.CreateOptions{}); err != nil {
						return i, err
					}
				}
				return max, nil
			}
			// Before: the grandchild stored up to its own cap, the child
			// as much again, the parent as much again.
			n, err := fill("root:tree-a:kid:grandkid", 100)
			if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "workspace root:tree-a, which root:tree-a:kid:grandkid is inside") ||
				!strings.Contains(err.Error(), fmt.Sprintf("its limit (the server's --workspace-max-objects) is %d", limit)) {
				t.Fatalf("filling the grandchild: %d configmaps, then %v", n, err)
			}
			// The child and the parent are full too.
			for _, ws := range []string{"root:tree-a:kid", "root:tree-a"} {
				if m, err := fill(ws, 1); err == nil || !apierrors.IsForbidden(err) {
					t.Errorf("a create in %s of the full tree: %d, %v", ws, m, err)
				}
			}
			// A new workspace in the full tree is refused as well.
			out, err := s.KubectlErr("root:tree-a:kid", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata:\n  name: one-more\n", "create", "-f", "-")
			if err == nil || !strings.Contains(out, "a new workspace needs 5") {
				t.Errorf("a new workspace in the full tree: %v\n%s", err, out)
			}
			// SQL: the whole tree stores no more than the cap.
			db := openDatastore(t, s)
			var stored int64
			q := `SELECT COALESCE(SUM(objects), 0) FROM kcp_cluster_footprint WHERE cluster = 'root:tree-a' OR cluster LIKE 'root:tree-a:%'`
			if err := db.QueryRowContext(ctx, q).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if stored > limit || stored < limit-5 {
				t.Errorf("SQL: the tree root:tree-a stores %d objects, cap %d", stored, limit)
			}
			// Another tree is not affected.
			if m, err := fill("root:tree-b", 20); err != nil {
				t.Errorf("root:tree-b refused after %d creates: %v", m, err)
			}
			// A deletion in the grandchild makes room in the tree.
			if err := s.Client("root:tree-a:kid:grandkid").CoreV1().ConfigMaps("default").Delete(ctx, "fill-0", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Client("root:tree-a").CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-delete"}}, metav1.CreateOptions{}); err != nil {
				t.Errorf("a create in the parent after a deletion in the grandchild: %v", err)
			}
		})
	}
}
