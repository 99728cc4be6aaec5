package satokens

import (
	"context"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// A username tells nothing about how it was proven: a token file, an OIDC
// provider or an impersonation may all say system:serviceaccount:ns:name.
// What only a real service-account token does is make the token validator
// look up that service account (in the request's logical cluster, through
// Getter). WithServiceAccountIdentity watches for that lookup during
// authentication and, when the authenticated user is the very service
// account looked up, hands on a user that says so (ServiceAccountUser).
// Impersonation replaces the user with a plain one, so the mark never
// survives it.

type witnessKey struct{}

// witness records the service accounts the token validator found while
// one request was authenticated.
type witness struct {
	mu    sync.Mutex
	found []found
}

type found struct {
	cluster  logicalcluster.Name
	username string
	uid      string
}

// record notes a service account the validator found in cluster.
func record(ctx context.Context, cluster logicalcluster.Name, sa *corev1.ServiceAccount) {
	w, ok := ctx.Value(witnessKey{}).(*witness)
	if !ok || sa == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.found = append(w.found, found{cluster: cluster, username: serviceaccount.MakeUsername(sa.Namespace, sa.Name), uid: string(sa.UID)})
}

// ServiceAccountUser is a user authenticated by a service-account token of
// Cluster; only WithServiceAccountIdentity makes one.
type ServiceAccountUser struct {
	user.Info
	Cluster logicalcluster.Name
}

// ServiceAccountCluster is the logical cluster whose service account
// authenticated the user.
func (u ServiceAccountUser) ServiceAccountCluster() logicalcluster.Name { return u.Cluster }

// WithServiceAccountIdentity wraps the server's authenticator.
func WithServiceAccountIdentity(delegate authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		w := &witness{}
		resp, ok, err := delegate.AuthenticateRequest(req.WithContext(context.WithValue(req.Context(), witnessKey{}, w)))
		if !ok || err != nil || resp == nil || resp.User == nil {
			return resp, ok, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, f := range w.found {
			if f.username == resp.User.GetName() && f.uid != "" && f.uid == resp.User.GetUID() {
				resp.User = ServiceAccountUser{Info: resp.User, Cluster: f.cluster}
				break
			}
		}
		return resp, ok, err
	})
}
