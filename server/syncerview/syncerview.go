// Package syncerview serves a syncer its view of kcp: the objects assigned
// to its SyncTarget, in every logical cluster that places onto it, with one
// list and one watch per resource, and the few writes a syncer needs.
//
//	/services/syncer/<location workspace>/<sync target>/clusters/<cluster or *>/<API path>
//
// The caller authenticates as usual, in the location workspace (the
// syncer's service-account token lives there), and needs the verb "sync"
// on that SyncTarget there (kubectl kcp workload sync grants it to the
// syncer's service account alone). Then, and only for the resources kcp
// syncs (and namespaces):
//
//   - list and watch, across all clusters (*) or in one, with the label
//     selector state.workload.kcp.io/<target key>=Sync added to whatever the
//     caller asked: nothing unassigned, nothing of another target;
//   - a merge patch of the status subresource whose body holds status only,
//     of an object assigned to the target;
//   - a JSON patch that removes exactly the target's own finalizer;
//   - a merge patch of the status subresource that sets exactly the
//     target's own status annotation (workload.kcp.io/status-<target key>)
//     of an object several targets run, which kcp sums into its status;
//   - the writes of projections (what the physical cluster runs, written
//     back read-only; projected.go);
//   - a token of a ServiceAccount of a namespace assigned to the target,
//     for the pods it runs there (tokens.go).
//
// Everything else is refused. An accepted request continues down the
// normal handler chain as the identity system:kcp:syncer:<location>:<name>
// (in system:masters, since it reads across clusters), which only this
// filter can grant: the client's own credentials and any impersonation
// headers are dropped.
package syncerview

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/crdserving"
	"github.com/kcpsql/kcp/server/routing"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Prefix starts every view path.
const Prefix = "/services/syncer/"

// Path returns the view's URL path prefix for one SyncTarget (what a
// syncer puts in front of /clusters/...).
func Path(location logicalcluster.Name, target string) string {
	return Prefix + string(location) + "/" + target
}

// maxPatch bounds the body a view patch may have (a status).
const maxPatch = 2 << 20

// identity is the user a view request continues as.
func identity(location logicalcluster.Name, target string) user.Info {
	return viewidentity.Privileged("system:kcp:syncer:" + string(location) + ":" + target)
}

// Filter is the view's handler; build it with New.
type Filter struct {
	gate    *viewidentity.Gate
	clients *clusterinformer.Clients
	next    http.Handler
	exports Exports
}

// Exports finds a location's export of negotiated resources
// (apiresource.ExportName): a list or watch across all clusters of one of
// its resources reads the objects stored under its identity, those of the
// workspaces that bound it.
type Exports interface {
	Export(provider logicalcluster.Name, name string) (*boundapis.Export, error)
}

// New returns next, with view requests handled first.
func New(next http.Handler, authn authenticator.Request, authz authorizer.Authorizer, loopback *rest.Config, exports Exports) (http.Handler, error) {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	return &Filter{clients: clients, next: next, exports: exports, gate: &viewidentity.Gate{
		Prefix:   Prefix,
		PathHelp: "a syncer view path is " + Prefix + "<location workspace>/<sync target>/clusters/<cluster or *>/<API path>",
		Authn:    authn, Authz: authz,
		Resource: workload.SyncTargetsResource, Verb: workload.VerbSync,
		Denied: func(caller string, location logicalcluster.Name, target string) error {
			return fmt.Errorf("%q may not use the syncer view of SyncTarget %s in %s (needs the verb %q on it there)", caller, target, location, workload.VerbSync)
		},
	}}, nil
}

func (f *Filter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !strings.HasPrefix(req.URL.Path, Prefix) {
		f.next.ServeHTTP(w, req)
		return
	}
	opened, ok := f.gate.Open(w, req)
	if !ok {
		return
	}
	location, target, rest := opened.Workspace, opened.Name, opened.Rest
	// What it asks for.
	cluster, apiPath, err := routing.Split("/" + rest)
	if err != nil {
		viewidentity.Refuse(w, apierrors.NewBadRequest(err.Error()), "")
		return
	}
	info, err := viewidentity.RequestInfo(req, apiPath)
	if err != nil || !info.IsResourceRequest {
		viewidentity.Refuse(w, apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("the syncer view serves only the resources kcp syncs")), "")
		return
	}
	// Any resource: only what kcp assigned to the target carries its
	// label, and only kcp may set it (placement admission).
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	key := workload.TargetKey(string(location), target)
	q := req.URL.Query()
	switch {
	case info.Verb == "list" || info.Verb == "watch":
		sel, err := labels.Parse(q.Get("labelSelector"))
		if err != nil {
			viewidentity.Refuse(w, apierrors.NewBadRequest(err.Error()), "")
			return
		}
		if own, ok := projectedList(gr, sel, key); ok {
			// The syncer's own projections (projected.go).
			q.Set("labelSelector", own.String())
			break
		}
		r, _ := labels.NewRequirement(workload.StateLabelPrefix+key, selection.Equals, []string{workload.StateSync})
		q.Set("labelSelector", sel.Add(*r).String())
	case projectedWrite(info, cluster):
		if err := f.checkProjected(req, cluster, info, key); err != nil {
			viewidentity.Refuse(w, err, "")
			return
		}
	case tokenRequest(info, cluster):
		if err := f.checkTokenRequest(req, cluster, info, key); err != nil {
			viewidentity.Refuse(w, err, "")
			return
		}
	case info.Verb == "patch" && !cluster.IsWildcard() && gr.Resource != "namespaces":
		if err := f.checkPatch(req, cluster, info, key); err != nil {
			viewidentity.Refuse(w, err, "")
			return
		}
	default:
		viewidentity.Refuse(w, apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the syncer view allows list and watch, a status merge patch, the syncer's own status annotation and the removal of its own finalizer, projections and tokens for its pods; not %s", info.Verb)), "")
		return
	}
	ctx := context.WithValue(viewidentity.WithTenant(req.Context(), location, string(location)+"/"+target), syncerKey{}, true)
	if cluster.IsWildcard() && f.exports != nil && gr.Group != "" {
		if e, _ := f.exports.Export(location, apiresource.ExportName); e != nil {
			for _, r := range e.Resources {
				if r.Group == gr.Group && r.Resource == gr.Resource {
					ctx = crdserving.WithExport(ctx, e.Identity)
				}
			}
		}
	}
	// Continue as the view's identity, at the cluster path.
	out := viewidentity.Continue(ctx, req, identity(location, target), "/"+rest, q)
	f.next.ServeHTTP(w, out)
}

type syncerKey struct{}

// FromSyncer reports whether the request of ctx is a syncer's that its
// view checked and let through (a context value: no client can set it).
// A frozen workspace still takes these writes (server/frozen): they are
// the physical world's truth.
func FromSyncer(ctx context.Context) bool {
	v, _ := ctx.Value(syncerKey{}).(bool)
	return v
}

// checkPatch allows a status-only merge patch of an assigned object, or a
// JSON patch that removes exactly the target's finalizer from an object
// that has it.
func (f *Filter) checkPatch(req *http.Request, cluster logicalcluster.Name, info *apirequest.RequestInfo, key string) *apierrors.StatusError {
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPatch+1))
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if len(body) > maxPatch {
		return apierrors.NewRequestEntityTooLargeError("a syncer view patch is limited to 2 MiB")
	}
	ct := strings.TrimSpace(strings.Split(req.Header.Get("Content-Type"), ";")[0])
	finalizer := workload.FinalizerPrefix + key
	var forward []byte
	switch {
	case info.Subresource == "status":
		// {"status": ...}, or its own status of an object several targets
		// run, in its own annotation: {"metadata":{"annotations":{"<prefix><key>":"..."}}}.
		if ct == "application/merge-patch+json" {
			forward, err = statusPatch(body, key)
		}
		if ct != "application/merge-patch+json" || err != nil {
			return apierrors.NewForbidden(gr, info.Name, fmt.Errorf("a syncer may patch status only with a merge patch {\"status\": ...} or one that sets its annotation %s (%v)", workload.StatusAnnotationPrefix+key, reason(ct, "application/merge-patch+json", err)))
		}
	case info.Subresource == "":
		if ct == "application/json-patch+json" {
			forward, err = finalizerRemoval(body, finalizer)
		}
		if ct != "application/json-patch+json" || err != nil {
			return apierrors.NewForbidden(gr, info.Name, fmt.Errorf("a syncer may change an object only by removing its finalizer %s (a JSON patch: test, then remove) (%v)", finalizer, reason(ct, "application/json-patch+json", err)))
		}
	default:
		return apierrors.NewForbidden(gr, info.Name, fmt.Errorf("the syncer view does not serve %s/%s", info.Resource, info.Subresource))
	}
	// What goes on is the patch built from the checked values, never the
	// client's bytes.
	req.Body = io.NopCloser(bytes.NewReader(forward))
	req.ContentLength = int64(len(forward))
	req.Header.Set("Content-Type", ct)
	req.Header.Del("Content-Encoding")
	d, err := f.clients.Dynamic(cluster)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	obj, err := d.Resource(gr.WithVersion(info.APIVersion)).Namespace(info.Namespace).Get(req.Context(), info.Name, metav1.GetOptions{})
	if err != nil {
		// Do not tell whether an unassigned object exists.
		return apierrors.NewNotFound(gr, info.Name)
	}
	assigned := obj.GetLabels()[workload.StateLabelPrefix+key] == workload.StateSync
	if info.Subresource == "" {
		for _, f := range obj.GetFinalizers() {
			if f == finalizer {
				assigned = true
			}
		}
	}
	if !assigned {
		return apierrors.NewNotFound(gr, info.Name)
	}
	return nil
}

// reason says why a patch was refused: its content type or its content.
func reason(ct, want string, err error) string {
	if ct != want {
		return fmt.Sprintf("content type %q, want %s", ct, want)
	}
	return err.Error()
}
