package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/conditions"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/admission/workspaceowner"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// errOrphanDeleted asks for another look once an earlier incarnation's
// cluster was (being) deleted.
var errOrphanDeleted = errors.New("an earlier logical cluster of this name is being deleted")

func (r *reconciler) bootstrap(ctx context.Context, parent, child logicalcluster.Name, ws *unstructured.Unstructured) (time.Duration, error) {
	if !slices.Contains(ws.GetFinalizers(), tenancy.WorkspaceFinalizer) {
		if err := r.addFinalizer(ctx, parent, ws); err != nil {
			return 0, err
		}
	}
	phase, _, _ := unstructured.NestedString(ws.Object, "status", "phase")
	if phase == tenancy.PhaseReady {
		return 0, r.syncSpec(ctx, parent, ws.GetName(), child, copiedOf(ws))
	}
	url := r.serverURL + "/clusters/" + string(child)
	if r.stored.has(child, ws.GetUID()) {
		// Stored on an earlier look: only the registry is awaited.
		return r.setReady(ctx, parent, child, ws, url)
	}
	// The child's clients only when a request needs them (most new
	// workspaces need none: building them was 2% of the server's CPU
	// while creating workspaces).
	childClients := sync.OnceValues(func() (*clients, error) { return r.clients(child) })
	lc := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": tenancy.Group + "/" + tenancy.Version,
		"kind":       "LogicalCluster",
		"metadata":   map[string]interface{}{"name": tenancy.LogicalClusterName, "annotations": ownerAnnotation(ws)},
		"spec": map[string]interface{}{
			"owner": map[string]interface{}{"cluster": string(parent), "name": ws.GetName(), "uid": string(ws.GetUID())},
		},
	}}
	copiedOf(ws).set(lc)
	created, err := r.storeLogicalCluster(ctx, child, lc)
	if err != nil {
		return 0, err
	}
	if uid, _, _ := unstructured.NestedString(created.Object, "spec", "owner", "uid"); uid != string(ws.GetUID()) {
		// The earlier Workspace of this name is gone (a name holds one
		// object at a time) but its cluster is not: delete it, then
		// come back to create this one.
		if err := r.setStatus(ctx, parent, ws, tenancy.PhaseInitializing, "",
			fmt.Sprintf("logical cluster %s still belongs to an earlier workspace of this name that is being deleted", child)); err != nil {
			return 0, err
		}
		if _, err := r.deleteOrphan(ctx, parent, ws.GetName()); err != nil {
			return 0, err
		}
		return 0, errOrphanDeleted
	}
	if err := r.storeNamespaces(ctx, child, DefaultNamespaces...); err != nil {
		return 0, err
	}
	if owner, ok := ownerOf(ws); ok && !r.ownerBindingServed {
		cc, err := childClients()
		if err != nil {
			return 0, err
		}
		if err := r.grantOwner(ctx, cc, owner); err != nil {
			return 0, err
		}
	}
	// The type's default APIs are bound before the workspace is Ready: a
	// workspace of type team has the platform APIs from its first moment.
	if waiting, err := r.bindDefaults(ctx, childClients, ws); err != nil || waiting != "" {
		if c, _ := conditions.Find(ws, "Ready"); err == nil && c.Message != waiting {
			err = r.setStatus(ctx, parent, ws, tenancy.PhaseInitializing, "", waiting)
		}
		// Soon while the binding controller catches up; slower for a
		// binding that stays unbound (a missing export).
		retry := bindRetry
		if time.Since(ws.GetCreationTimestamp().Time) > time.Minute {
			retry = 10 * time.Second
		}
		return retry, err
	}
	// The server stores a new LogicalCluster Ready (logicalclusters.
	// StoredReady); one stored by an earlier release is made Ready here.
	if phase, _, _ := unstructured.NestedString(created.Object, "status", "phase"); phase != tenancy.PhaseReady {
		if err := unstructured.SetNestedField(created.Object, map[string]interface{}{"phase": tenancy.PhaseReady, "URL": url}, "status"); err != nil {
			return 0, err
		}
		cc, err := childClients()
		if err != nil {
			return 0, err
		}
		if _, err := cc.dynamic.Resource(tenancy.LogicalClustersResource).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return 0, err
		}
	}
	return r.setReady(ctx, parent, child, ws, url)
}

// addFinalizer adds the controller's finalizer to ws (and takes the
// updated object into ws).
func (r *reconciler) addFinalizer(ctx context.Context, parent logicalcluster.Name, ws *unstructured.Unstructured) error {
	pc, err := r.clients(parent)
	if err != nil {
		return err
	}
	ws.SetFinalizers(append(ws.GetFinalizers(), tenancy.WorkspaceFinalizer))
	updated, err := pc.dynamic.Resource(tenancy.WorkspacesResource).Update(ctx, ws, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	*ws = *updated
	return nil
}

// setReady sets a Workspace whose objects are stored Ready once the
// registry routes requests to its cluster: Ready means usable, and the
// registry sees a LogicalCluster soon after it is stored. Until then the
// Workspace is looked at again, and that look only asks the registry.
func (r *reconciler) setReady(ctx context.Context, parent, child logicalcluster.Name, ws *unstructured.Unstructured, url string) (time.Duration, error) {
	if exists, _ := r.clusterState(child); !exists {
		if time.Since(ws.GetCreationTimestamp().Time) > 10*time.Second {
			// Not a moment's lag: look less often, and store the
			// objects again on each look (idempotent), in case what
			// was stored is gone.
			r.stored.forget(child)
			return time.Second, nil
		}
		r.stored.remember(child, ws.GetUID())
		return registryRetry, nil
	}
	if err := r.setStatus(ctx, parent, ws, tenancy.PhaseReady, url, ""); err != nil {
		return 0, err
	}
	r.stored.forget(child)
	return 0, nil
}

// registryRetry is how soon a workspace whose LogicalCluster the registry
// has not seen yet is looked at again.
const registryRetry = 20 * time.Millisecond

// bindRetry is how soon a workspace waiting for its default bindings is
// looked at again (their status is written by another controller).
const bindRetry = 300 * time.Millisecond

// bindDefaults creates the APIBindings recorded by admission from the
// workspace's type (tenancy.TypeAnnotation) and says what is not bound yet
// ("" when all are). The creator's right to bind each was checked at
// admission; the bindings are created with kcp's identity.
func (r *reconciler) bindDefaults(ctx context.Context, childClients func() (*clients, error), ws *unstructured.Unstructured) (string, error) {
	raw := ws.GetAnnotations()[tenancy.TypeAnnotation]
	if raw == "" {
		return "", nil
	}
	cc, err := childClients()
	if err != nil {
		return "", err
	}
	var rt tenancy.ResolvedType
	if err := json.Unmarshal([]byte(raw), &rt); err != nil {
		return "", fmt.Errorf("reading %s: %v", tenancy.TypeAnnotation, err)
	}
	bindings := cc.dynamic.Resource(apis.BindingsResource)
	for _, b := range rt.Bindings {
		binding := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": apis.Group + "/" + apis.Version,
			"kind":       "APIBinding",
			"metadata":   map[string]interface{}{"name": b.Export},
			"spec": map[string]interface{}{
				"reference": map[string]interface{}{"export": map[string]interface{}{"path": b.Path, "name": b.Export}},
			},
		}}
		got, err := bindings.Create(ctx, binding, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = bindings.Get(ctx, b.Export, metav1.GetOptions{})
		}
		if err != nil {
			return "", fmt.Errorf("binding APIExport %s of %s: %v", b.Export, b.Path, err)
		}
		if c, ok := conditions.Find(got, apis.ConditionBound); !ok || c.Status != "True" {
			msg := c.Message
			if !ok {
				msg = "not looked at yet"
			}
			return fmt.Sprintf("waiting for APIBinding %s (APIExport %s of %s, from workspace type %s of %s) to be bound: %s", b.Export, b.Export, b.Path, rt.Name, rt.Path, msg), nil
		}
	}
	return "", nil
}

// DefaultNamespaces are the namespaces every new logical cluster has, as a
// new Kubernetes cluster does (kube-node-lease aside: logical clusters have
// no nodes). Tools and charts expect kube-system and kube-public.
var DefaultNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic}

// ownerAnnotation carries the recorded owner over to the LogicalCluster,
// where the authorizer finds it.
func ownerAnnotation(ws *unstructured.Unstructured) map[string]interface{} {
	if raw, ok := ws.GetAnnotations()[tenancy.OwnerAnnotation]; ok {
		return map[string]interface{}{tenancy.OwnerAnnotation: raw}
	}
	return map[string]interface{}{}
}

func ownerOf(ws *unstructured.Unstructured) (workspaceowner.Owner, bool) {
	var o workspaceowner.Owner
	raw := ws.GetAnnotations()[tenancy.OwnerAnnotation]
	if raw == "" || json.Unmarshal([]byte(raw), &o) != nil || o.Username == "" {
		return o, false
	}
	return o, true
}

// grantOwner makes the creator cluster-admin inside the child. Entering the
// workspace and managing its Workspace object in the parent need no RBAC
// object per workspace: the authorizer reads the owner from the
// LogicalCluster, so a parent with many workspaces keeps its bindings few.
func (r *reconciler) grantOwner(ctx context.Context, cc *clients, owner workspaceowner.Owner) error {
	inside := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace-owner"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: owner.Username}},
	}
	if _, err := cc.rbac.ClusterRoleBindings().Create(ctx, inside, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// setStatus writes phase, URL and a Ready condition carrying msg.
func (r *reconciler) setStatus(ctx context.Context, parent logicalcluster.Name, ws *unstructured.Unstructured, phase, url, msg string) error {
	status := map[string]interface{}{}
	if phase != "" {
		status["phase"] = phase
	}
	if url != "" {
		status["URL"] = url
		status["cluster"] = string(parent.Join(ws.GetName()))
	}
	cond := map[string]interface{}{
		"type": "Ready", "status": "False", "reason": phase, "message": msg,
		"lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z"),
	}
	if phase == tenancy.PhaseReady {
		cond["status"], cond["reason"] = "True", "Ready"
	}
	if cond["reason"] == "" {
		cond["reason"] = "Invalid"
	}
	conds := []interface{}{cond}
	if reason := logicalclusters.FrozenOf(ws, "spec", "frozen"); reason != "" {
		conds = append(conds, frozenCondition(reason))
	}
	status["conditions"] = conds
	ws.Object["status"] = status
	return r.storeStatus(ctx, parent, ws)
}
