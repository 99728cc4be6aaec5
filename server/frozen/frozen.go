// Package frozen makes a frozen workspace read-only: while its Workspace's
// spec.frozen is set (copied to its LogicalCluster) or a restore holds it
// (tenancy.RestoreAnnotation on its LogicalCluster), every request that
// would change something in its logical cluster is refused with 403
// Forbidden and a message naming the reason. Reads and watches go on.
//
// Refused, on every resource (built-in, CRDs' custom resources, bound
// APIs', and their subresources): the verbs create, update, patch, delete
// and deletecollection, dry runs included; and, whatever the verb, the
// subresources that act on running workloads (pods/exec, pods/attach,
// pods/portforward and every proxy subresource). pods/log is a read and
// goes on; pods/eviction is a create and is refused.
//
// Let through although they write:
//   - the server's own loopback identity (system:apiserver): kcp's
//     controllers finish what they do (namespace deletion, garbage
//     collection, quota status, the workspace controller copying an
//     unfreeze, a restore's own writes). A tenant cannot be that user: the
//     name is kcp's own (no token or certificate of a tenant carries it and
//     clusterauthz refuses its impersonation outside root to anyone but
//     system:masters). system:masters itself is not let through: an
//     operator's kubectl stops at a freeze like everyone's, and an operator
//     who must write unfreezes first (or impersonates system:apiserver, on
//     purpose);
//   - creates that store nothing (Virtual): access and token reviews and
//     service-account tokens, so that kubectl auth can-i works and tokens
//     keep renewing;
//   - requests of a syncer through its view (syncerview.FromSyncer): all it
//     may write is the physical world's truth (status, projections, the
//     removal of its own finalizer, tokens for its pods);
//   - updates of a SyncTarget's status: the heartbeat a syncer writes in
//     its location workspace with its own token. Refused, a frozen location
//     would look dead after --synctarget-heartbeat-timeout, and placement
//     would move its workloads away: a freeze must not change the physical
//     world. (Whoever the location's RBAC allows to write that status can
//     while it is frozen.)
//
// The filter runs after authentication, impersonation and authorization:
// only those allowed the request learn that the workspace is frozen, and
// the user is the impersonated one.
package frozen

import (
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/server/syncerview"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Writes are the verbs refused in a frozen workspace.
var Writes = sets.New("create", "update", "patch", "delete", "deletecollection")

// Virtual are the creates that store nothing, allowed in a frozen
// workspace: reviews answer a question, a token request mints a token.
var Virtual = sets.New(
	schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"},
	schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"},
)

// workloadSubresources act on running workloads whatever their verb (a
// websocket exec is a GET).
var workloadSubresources = sets.New("exec", "attach", "portforward", "proxy")

// Refused reports whether a frozen workspace refuses a request: info is
// what it asks, u who asks (after impersonation), syncer whether it came
// through a syncer's view.
func Refused(info *request.RequestInfo, u user.Info, syncer bool) bool {
	if info == nil || !info.IsResourceRequest {
		// Discovery, OpenAPI, health: nothing to write.
		return false
	}
	if u != nil && u.GetName() == user.APIServerUser {
		return false
	}
	if syncer {
		return false
	}
	if workloadSubresources.Has(info.Subresource) {
		return true
	}
	if !Writes.Has(info.Verb) {
		return false
	}
	if info.APIGroup == workload.Group && info.Resource == workload.SyncTargetsResource.Resource && info.Subresource == "status" &&
		(info.Verb == "update" || info.Verb == "patch") {
		// A syncer's heartbeat: a frozen location must not look dead
		// (its targets NotReady, their workloads evicted).
		return false
	}
	if info.Verb == "create" {
		gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
		if info.Subresource == "" && Virtual.Has(gr) {
			return false
		}
		if gr == (schema.GroupResource{Resource: "serviceaccounts"}) && info.Subresource == "token" {
			return false
		}
	}
	return true
}

// Message is the refusal's message for cluster c frozen by f.
func Message(c logicalcluster.Name, f logicalclusters.Freeze) string {
	parent, _ := c.Parent()
	who := fmt.Sprintf("whoever may update Workspace %s in %s can unfreeze it", c.Base(), parent)
	if f.Move != "" && f.Restore == "" {
		return fmt.Sprintf("the workspace %s is frozen (read-only): %s; reads and watches still work; writes work again on the new shard when the move ends",
			c, logicalclusters.MoveReason(c, f.Move))
	}
	if f.Restore == "" {
		return fmt.Sprintf("the workspace %s is frozen (read-only): %s; reads and watches still work; %s", c, f.Reason, who)
	}
	msg := fmt.Sprintf("the workspace %s is frozen (read-only): %s; reads and watches still work; it unfreezes when the restore ends",
		c, logicalclusters.RestoreReason(c, f.Restore))
	if f.Reason != "" {
		msg += fmt.Sprintf(" (then it stays frozen by its Workspace: %s; %s)", f.Reason, who)
	}
	return msg
}

// WithFrozen refuses, with 403, the requests that a frozen cluster refuses
// (Refused); freezeOf tells what freezes a cluster (the registry's
// FreezeOf).
func WithFrozen(next http.Handler, freezeOf func(logicalcluster.Name) logicalclusters.Freeze) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		c, ok := logicalcluster.From(ctx)
		if !ok || c.IsWildcard() {
			next.ServeHTTP(w, r)
			return
		}
		f := freezeOf(c)
		if !f.Frozen() {
			next.ServeHTTP(w, r)
			return
		}
		info, _ := request.RequestInfoFrom(ctx)
		u, _ := request.UserFrom(ctx)
		if !Refused(info, u, syncerview.FromSyncer(ctx)) {
			next.ServeHTTP(w, r)
			return
		}
		refuse(w, info, Message(c, f))
	})
}

// refuse answers 403 with a Status as the API server words a Forbidden:
// `<resource> "<name>" is forbidden: <msg>`.
func refuse(w http.ResponseWriter, info *request.RequestInfo, msg string) {
	qualified := info.Resource
	if info.APIGroup != "" {
		qualified += "." + info.APIGroup
	}
	if info.Subresource != "" {
		qualified += "/" + info.Subresource
	}
	full := fmt.Sprintf("%s is forbidden: %s", qualified, msg)
	if info.Name != "" {
		full = fmt.Sprintf("%s %q is forbidden: %s", qualified, info.Name, msg)
	}
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: full,
		Details: &metav1.StatusDetails{Name: info.Name, Group: info.APIGroup, Kind: info.Resource},
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(status)
}
