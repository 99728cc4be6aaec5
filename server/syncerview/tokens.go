package syncerview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Tokens for the pods a syncer runs: a syncer may ask for a token of a
// ServiceAccount of a namespace assigned to its target (the pods it runs
// there talk to their workspace with it, syncer/apiaccess.go). The token
// is an ordinary one of that ServiceAccount, issued in its own logical
// cluster, for kcp's own audiences, expiring within
// [MinTokenSeconds, MaxTokenSeconds], bound to no object; what goes on is a
// TokenRequest built here from the checked lifetime, never the client's
// bytes (no audiences of its choosing, no binding).

// Bounds of a syncer-requested token's lifetime.
const (
	MinTokenSeconds = 600
	MaxTokenSeconds = 24 * 3600
)

var serviceAccountsGR = schema.GroupResource{Resource: "serviceaccounts"}

// tokenRequest reports whether a view request asks for a ServiceAccount
// token.
func tokenRequest(info *apirequest.RequestInfo, cluster logicalcluster.Name) bool {
	return info.Verb == "create" && info.APIGroup == "" && info.Resource == "serviceaccounts" && info.Subresource == "token" &&
		info.Namespace != "" && info.Name != "" && !cluster.IsWildcard()
}

// checkTokenRequest allows a token of a ServiceAccount whose namespace is
// assigned to the target, and replaces the body with the checked request.
func (f *Filter) checkTokenRequest(req *http.Request, cluster logicalcluster.Name, info *apirequest.RequestInfo, key string) *apierrors.StatusError {
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<10+1))
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if len(body) > 64<<10 {
		return apierrors.NewRequestEntityTooLargeError("a TokenRequest is limited to 64 KiB")
	}
	var in authenticationv1.TokenRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return apierrors.NewBadRequest("a syncer's TokenRequest must be JSON: " + err.Error())
	}
	if len(in.Spec.Audiences) > 0 || in.Spec.BoundObjectRef != nil {
		return apierrors.NewForbidden(serviceAccountsGR, info.Name, fmt.Errorf("a syncer asks for tokens of kcp's own audiences, bound to no object"))
	}
	seconds := int64(3600)
	if in.Spec.ExpirationSeconds != nil {
		seconds = *in.Spec.ExpirationSeconds
	}
	if seconds < MinTokenSeconds || seconds > MaxTokenSeconds {
		return apierrors.NewBadRequest(fmt.Sprintf("a syncer's token lives between %d and %d seconds, not %d", MinTokenSeconds, MaxTokenSeconds, seconds))
	}
	d, err := f.clients.Dynamic(cluster)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	ns, err := d.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(req.Context(), info.Namespace, metav1.GetOptions{})
	if err != nil || ns.GetLabels()[workload.StateLabelPrefix+key] != workload.StateSync {
		// Do not tell whether an unassigned namespace exists.
		return apierrors.NewNotFound(serviceAccountsGR, info.Name)
	}
	out, _ := json.Marshal(authenticationv1.TokenRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"},
		Spec:     authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	})
	req.Body = io.NopCloser(bytes.NewReader(out))
	req.ContentLength = int64(len(out))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Del("Content-Encoding")
	return nil
}
