package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestWorkspaceLimits is issue 17's operator limits, on both dialects: the
// server's --workspace-max-objects caps every workspace but root, a
// Workspace's spec.limits set in its parent overrides it, exceeding a cap
// answers 403 naming the cap, a deletion makes room, and the tenant's own
// admin can raise neither cap.
func TestWorkspaceLimits(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			s := framework.StartServer(t, framework.DatastoreFor(t, d), "--workspace-max-objects=60")
			const a, b = "root:lim-a", "root:lim-b"
			s.CreateWorkspaces(a, b)
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

			// The server's default: refused somewhere below 60 creates (the
			// workspace's own defaults count), with a message naming the flag.
			n, err := fill(a, 100)
			if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "its limit (the server's --workspace-max-objects) is 60") || n >= 60 || n < 40 {
				t.Fatalf("filling %s: %d configmaps, then %v", a, n, err)
			}
			// Nothing of the refused create was stored.
			if _, err := s.Client(a).CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("fill-%d", n), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the refused configmap: %v", err)
			}
			// Root is not capped.
			if m, err := fill("root", 70); err != nil {
				t.Errorf("root refused after %d creates: %v", m, err)
			}
			// A deletion makes room for one more.
			if err := s.Client(a).CoreV1().ConfigMaps("default").Delete(ctx, "fill-0", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Client(a).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-delete"}}, metav1.CreateOptions{}); err != nil {
				t.Errorf("a create after a deletion: %v", err)
			}

			// The parent caps b lower with spec.limits on its Workspace.
			s.Kubectl("root", "patch", "workspace", "lim-b", "--type=merge", "-p", `{"spec":{"limits":{"objects":20}}}`)
			if out, err := s.KubectlErr("root", "", "patch", "workspace", "lim-b", "--type=merge", "-p", `{"spec":{"limits":{"objects":-1}}}`); err == nil || !strings.Contains(out, "should be greater than or equal to 0") {
				t.Errorf("a negative limit: want a refusal, got %v\n%s", err, out)
			}
			framework.Eventually(t, 30*time.Second, "b capped at 20 by its Workspace", func() (bool, string) {
				n, err := fill(b, 30)
				return err != nil && strings.Contains(err.Error(), "its limit (spec.limits.objects of its Workspace) is 20") && n < 20, fmt.Sprintf("%d created, then %v", n, err)
			})

			// b's own admin (not system:masters) can lift neither cap: the
			// LogicalCluster is kcp's, the Workspace is in the parent. (b is
			// full: room for the admin's binding first.)
			s.Kubectl(b, "delete", "configmap", "fill-0", "fill-1")
			applyYAML(t, s, "root", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lim-b-members}
rules:
- {apiGroups: ["tenancy.kcp.io"], resources: ["workspaces/content"], resourceNames: ["lim-b"], verbs: ["access"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lim-b-members}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lim-b-members}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: b-admin}
`)
			applyYAML(t, s, b, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: b-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: b-admin}
`)
			admin := framework.UserClient(t, s, "b-admin")
			patch := `{"spec":{"limits":{"objects":1000000}}}`
			for _, url := range []string{
				s.URL() + "/clusters/" + b + "/apis/tenancy.kcp.io/v1alpha1/logicalclusters/cluster",
				s.URL() + "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces/lim-b",
			} {
				code, body := framework.DoWith(t, admin, http.MethodPatch, url, patch, map[string]string{"Content-Type": "application/merge-patch+json"})
				if code != http.StatusForbidden {
					t.Errorf("b's admin patching %s: %d %s", url, code, body)
				}
			}
			if code, body := framework.Do(t, admin, http.MethodGet, s.URL()+"/clusters/"+b+"/api/v1/namespaces/default/configmaps/fill-3", ""); code != http.StatusOK {
				t.Errorf("b's admin cannot read in b: %d %s", code, body)
			}
			if lim := s.Kubectl(b, "get", "logicalcluster", "cluster", "-o", "jsonpath={.spec.limits.objects}"); lim != "20" {
				t.Errorf("b's LogicalCluster limits: %q", lim)
			}
		})
	}
}
